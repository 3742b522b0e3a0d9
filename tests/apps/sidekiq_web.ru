# Sidekiq's Web UI for the Sidekiq mode's tests, served with `rackup` (WEBrick): the Sidekiq app of
# sidekiq_peer.rb (REDIS_URL, SIDEKIQ_NAMESPACE), with the session Sidekiq::Web needs for its forms.
require_relative "sidekiq_peer"
require "sidekiq/web"
require "securerandom"

use Rack::Session::Cookie, secret: SecureRandom.hex(64), same_site: true, max_age: 86_400
run Sidekiq::Web
