// The ready proxy from the package: the limiter in front of ORIGIN, configured in wrangler.toml.
export { default, RateLimiter } from "strict-edge-rate-limiter/proxy";
