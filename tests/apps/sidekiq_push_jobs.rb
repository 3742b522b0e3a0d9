# Ruby job classes that cogworker pushes by name (cogworker.push_named, ruby_job, `cogworker enqueue`):
# each records the run it got, as JSON of its class and arguments, in the Redis set `push:ran`.
require "json"

class HardWorker
  include Sidekiq::Worker

  def perform(*args)
    Sidekiq.redis { |conn| conn.sadd("push:ran", JSON.generate(["HardWorker", args])) }
  end
end

module Billing
  class InvoiceJob
    include Sidekiq::Worker

    def perform(number, label)
      Sidekiq.redis { |conn| conn.sadd("push:ran", JSON.generate(["Billing::InvoiceJob", [number, label]])) }
    end
  end
end
