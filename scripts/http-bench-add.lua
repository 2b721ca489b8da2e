-- http-bench-add.lua -- wrk script: POST /v1/topics/bench/jobs with a body of
-- BENCH_SIZE bytes (default 100) and no id (the server makes one), so every
-- request adds a new job. Used by scripts/http-bench.
local size = tonumber(os.getenv("BENCH_SIZE") or "100")
wrk.method = "POST"
wrk.path = "/v1/topics/bench/jobs"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"body":"' .. string.rep("x", size) .. '"}'

function done(summary, latency, requests)
  local bad = summary.errors.status + summary.errors.connect + summary.errors.read +
              summary.errors.write + summary.errors.timeout
  io.write(string.format("JSON {\"requests\": %d, \"seconds\": %.3f, \"errors\": %d, \"p99_ms\": %.3f}\n",
                         summary.requests, summary.duration / 1e6, bad,
                         latency:percentile(99) / 1000))
end
