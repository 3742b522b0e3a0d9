# A Sidekiq app beside a cogworker deployment in the Sidekiq mode (COGWORKER_SIDEKIQ_COMPAT): Sidekiq's
# own keys, bare, or under the redis-namespace SIDEKIQ_NAMESPACE names (Sidekiq 6 only). Tests require
# this file first and then their own job classes (SIDEKIQ_JOBS, a path), so each keeps its Ruby jobs
# beside its Python ones.
require "sidekiq"
require "sidekiq/api"

redis = { url: ENV.fetch("REDIS_URL") }
namespace = ENV.fetch("SIDEKIQ_NAMESPACE", "")
unless namespace.empty?
  require "redis-namespace"
  redis[:namespace] = namespace
end
# redis-rb 4.8 warns on stderr about every BRPOP's argument form: one write per fetch, and a log no
# test can read.
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
Sidekiq.configure_server do |config|
  config.redis = redis
  # Look at the retry and schedule sets every second or so, not every 5 to 15 seconds.
  config.average_scheduled_poll_interval = 1
end
Sidekiq.configure_client { |config| config.redis = redis }

jobs = ENV.fetch("SIDEKIQ_JOBS", "")
require jobs unless jobs.empty?
