# The Ruby side of a mixed fleet (tests/e2e/sidekiq/, loaded by tests/apps/sidekiq_peer.rb through
# SIDEKIQ_JOBS): FleetRubyJob, which Python pushes through its stub in tests/apps/sidekiq_fleet_jobs.py.
# It counts its attempts and successes by jid as the Python job does, and fails its first attempt
# when its second argument says so.
# Notes each retry that Sidekiq's poller moves back to a queue (its push runs the client middleware;
# cogworker's poller runs none), so the test tells which side graduated each retry.
class FleetGraduationProbe
  def call(_worker_class, job, _queue, _redis_pool)
    Sidekiq.redis { |conn| conn.sadd("fleet:graduated_by_ruby", job["jid"]) } if job.key?("retry_count")
    yield
  end
end

Sidekiq.configure_server do |config|
  config.client_middleware { |chain| chain.add FleetGraduationProbe }
end

class FleetRubyJob
  include Sidekiq::Worker
  sidekiq_options queue: "fleet_rb"
  # One second (plus Sidekiq's jitter, rand(10) * (count + 1)) instead of the 15 s the default
  # backoff starts at.
  sidekiq_retry_in { |_count, _exception| 1 }

  def perform(n, fail_first)
    attempt = Sidekiq.redis { |conn| conn.hincrby("fleet:rb:attempts", jid, 1) }
    raise "the first attempt of #{n} fails" if fail_first && attempt == 1

    Sidekiq.redis { |conn| conn.hincrby("fleet:rb:done", jid, 1) }
  end
end

# The Ruby class of docs/migrating/beside-sidekiq.md's stub (docs/examples/sidekiq/beside_sidekiq.py): it records
# its arguments, for tests/e2e/sidekiq/test_guide_examples.py.
class HardWorker
  include Sidekiq::Worker
  sidekiq_options queue: "ruby_default"

  def perform(count, label)
    Sidekiq.redis { |conn| conn.rpush("guide:hard_worker", "#{count} #{label}") }
  end
end
