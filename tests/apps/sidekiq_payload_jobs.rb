# The Ruby side of tests/e2e/worker/test_sidekiq_payloads.py (loaded by sidekiq_peer.rb): each class has
# a Python job of the same name in sidekiq_payload_jobs.py. A server middleware keeps every payload
# Sidekiq runs (as it came from Redis) on the list `payload-test:ran` (under the namespace, if any), so a test can read exactly what
# cogworker wrote; a death handler notes each death on `payload-test:ruby-deaths`.

class PayloadRecorder
  def call(_worker, job, _queue)
    Sidekiq.redis { |conn| conn.rpush("payload-test:ran", Sidekiq.dump_json(job)) }
    yield
  end
end

Sidekiq.configure_server do |config|
  config.server_middleware { |chain| chain.add PayloadRecorder }
  config.death_handlers << lambda do |job, _exception|
    Sidekiq.redis { |conn| conn.rpush("payload-test:ruby-deaths", job["jid"]) }
  end
end

# Fails wherever it runs: in Sidekiq here, in cogworker in Python.
class PingPongJob
  include Sidekiq::Worker
  sidekiq_options queue: "pingpong", retry: 2

  def perform(*args)
    raise "failed in Sidekiq: #{args.inspect}"
  end
end

# Run by Sidekiq after cogworker scheduled it (perform_in).
class LaterJob
  include Sidekiq::Worker
  sidekiq_options queue: "rb"

  def perform(*args); end
end

# retry: false, failing on either side: discarded by both.
class DiscardJob
  include Sidekiq::Worker
  sidekiq_options retry: false

  def perform(*args)
    raise "discarded in Sidekiq: #{args.inspect}"
  end
end
