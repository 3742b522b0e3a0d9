# The Ruby side of a cogworker deployment shared with Sidekiq 6 on one Redis: redis-namespace puts
# Sidekiq's keys under cogworker's default prefix, so both read the same queues and sets. BridgeJob is
# the Ruby class of the job sidekiq_bridge_jobs.py defines in Python under the same name; here it
# always raises, so its failure goes through Sidekiq's retry code.
require "sidekiq"
require "sidekiq/api"
require "sidekiq/job_retry"

redis = { url: ENV.fetch("REDIS_URL"), namespace: "cogworker" }
Sidekiq.configure_server do |config|
  config.redis = redis
  # Look at the retry and schedule sets every second or so, not every 5 to 15 seconds.
  config.average_scheduled_poll_interval = 1
end
Sidekiq.configure_client { |config| config.redis = redis }

class BridgeJob
  include Sidekiq::Worker

  def perform(*args)
    raise "failed in Sidekiq: #{args.inspect}"
  end
end
