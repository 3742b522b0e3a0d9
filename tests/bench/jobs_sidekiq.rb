# Sidekiq's benchmark jobs: the bodies of jobkit.py, written in Ruby.
#
# Each job reports to the bench Redis (BENCH_REDIS_URL) on a connection of its own thread, as the
# Python systems' jobs do (jobkit.client), so every system pays the same round trips per job and the
# harness can take them out of the commands-per-job figure (throughput.py).
# redis-rb sends INCR as INCR (redis-py sends INCRBY key 1): systems/sidekiq_system.py says so.
require "sidekiq"
require "redis"
require "socket"

# Sidekiq logs a "start" and a "done" line per job at its default level; the other systems log
# nothing per job (rq and cogworker are run at WARNING for that reason), so Sidekiq is too.
Sidekiq.logger.level = Logger::WARN
# Sidekiq 6.4 passes BRPOP's timeout positionally, and redis-rb 4.8 writes a deprecation warning to
# stderr for every such call: one write per fetch, which no other system pays.
Redis.silence_deprecations = true

module Bench
  def self.redis
    Thread.current[:bench_redis] ||= Redis.new(url: ENV.fetch("BENCH_REDIS_URL"))
  end

  def self.now
    Process.clock_gettime(Process::CLOCK_REALTIME)
  end

  # jobkit.io_wait's socket pair: nobody writes to it, so IO.select on one end waits its whole timeout
  # (both ends are kept: a closed peer would make it readable).
  def self.quiet
    @quiet ||= UNIXSocket.pair
  end
end

class NoopJob
  include Sidekiq::Worker

  def perform
    now = Bench.now
    count = Bench.redis.incr("bench:done")
    Bench.redis.set("bench:t:first", now.to_s) if count == 1
    Bench.redis.set("bench:t:last", Bench.now.to_s) if count == ENV.fetch("BENCH_TARGET", "0").to_i
  end
end

# `empty` in make bench (framework_cost.py): no body, so a drain measures Sidekiq's own machinery.
class EmptyJob
  include Sidekiq::Worker

  def perform; end
end

# The payload curve (curves/payload.py): NoopJob's body with one string argument of a given size.
class PayloadJob
  include Sidekiq::Worker

  def perform(_data)
    now = Bench.now
    count = Bench.redis.incr("bench:done")
    Bench.redis.set("bench:t:first", now.to_s) if count == 1
    Bench.redis.set("bench:t:last", Bench.now.to_s) if count == ENV.fetch("BENCH_TARGET", "0").to_i
  end
end

class PickupJob
  include Sidekiq::Worker

  def perform(pushed_at)
    started = Bench.now
    Bench.redis.rpush("bench:latency", ((started - pushed_at) * 1000.0).to_s)
  end
end

# The procs curve's I/O-bound job (jobkit.io_wait): 10 ms in a blocking wait on a socket, then NoopJob's body.
class IoWaitJob < NoopJob
  def perform
    IO.select([Bench.quiet.first], nil, nil, 0.01)
    super
  end
end

# The load curve's job (jobkit.record_paced).
class PacedJob
  include Sidekiq::Worker

  def perform(pushed_at)
    started = Bench.now
    Bench.redis.rpush("bench:paced", "#{pushed_at} #{(started - pushed_at) * 1000.0}")
  end
end

class SleeperJob
  include Sidekiq::Worker

  def perform(index, seconds)
    Bench.redis.rpush("bench:events", "start #{index} #{Process.pid} #{Bench.now}")
    sleep(seconds)
    Bench.redis.rpush("bench:events", "end #{index} #{Process.pid} #{Bench.now}")
  end
end
