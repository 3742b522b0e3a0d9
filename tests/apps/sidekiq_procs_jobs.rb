# The Ruby side of the Sidekiq mode's process tests (tests/e2e/sidekiq/test_sidekiq_procs.py): a job that
# runs until the test lets it go (the Redis key procs:release:<tag> appears), so cogworker's status,
# Web UI and doctor can be asked about the Sidekiq process while it runs.
class ProcsRubyBlock
  include Sidekiq::Worker
  sidekiq_options retry: false

  def perform(tag)
    Sidekiq.redis do |conn|
      conn.rpush("procs:started", "#{tag} #{Process.pid}")
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
      until conn.exists?("procs:release:#{tag}") || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        conn.blpop("procs:wake:#{tag}", timeout: 1)
      end
      conn.rpush("procs:ran", tag)
    end
  end
end
