-- wrk script: posts the signed webhook corpus round-robin with a fresh
-- X-GitHub-Delivery per request (the signature covers only the body).
-- Used only to calibrate relay-loadgen against wrk (docs/benchmarks.md):
--   wrk -t2 -c64 -d15s -s tools/bench/wrk-webhooks.lua http://127.0.0.1:PORT/github/webhook -- CORPUS_DIR
local requests = {}
local counter = 0

-- Each wrk thread runs init() in its own Lua state with the same unseeded
-- math.random, so ids drawn there repeat across threads (half the requests
-- were answered 200 duplicate, never produced). setup() runs once per
-- thread in the main state: it hands each thread its own id space.
local threads = 0
local run = tostring(os.time())
function setup(thread)
  threads = threads + 1
  thread:set("thread_id", threads)
  thread:set("run_id", run)
end

function init(args)
  local dir = args[1]
  for line in io.lines(dir .. "/manifest.tsv") do
    local event, file, sig = line:match("([^\t]+)\t([^\t]+)\t([^\t]+)")
    local f = assert(io.open(dir .. "/" .. file, "rb"))
    local body = f:read("*a")
    f:close()
    requests[#requests + 1] = {event = event, sig = sig, body = body}
  end
  prefix = "wrk-" .. run_id .. "-" .. thread_id .. "-"
end

function request()
  counter = counter + 1
  local r = requests[(counter % #requests) + 1]
  return wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["X-GitHub-Event"] = r.event,
    ["X-GitHub-Delivery"] = prefix .. counter,
    ["X-Hub-Signature-256"] = r.sig,
  }, r.body)
end
