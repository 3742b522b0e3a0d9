# The start-up curve's one-job app for Sidekiq (curves/startup.py): jobs_sidekiq.rb's no-op job alone.
require "sidekiq"
require "redis"

Sidekiq.logger.level = Logger::WARN

class NoopJob
  include Sidekiq::Worker

  def perform
    now = Process.clock_gettime(Process::CLOCK_REALTIME)
    redis = Thread.current[:bench_redis] ||= Redis.new(url: ENV.fetch("BENCH_REDIS_URL"))
    count = redis.incr("bench:done")
    redis.set("bench:t:first", now.to_s) if count == 1
  end
end
