"""Engines: booting, driving and stopping them. vLLM's AsyncLLM in this process (engine, with
engine_args: what vLLM is given), a server (server) and its client (endpoint), one engine alive at a
time (host), the code that runs inside vLLM's workers (in_vllm_worker) and the plants installed there at
boot (plants: plants_v1, plants_v2), an asyncio loop for synchronous callers
(eventloop), vLLM's logs (logstream: where its records go; enginelog: what a failed one says), and the
scripted model specgate.testing's fake engines answer requests with (scripted: vLLM's sampling rules, no
weights).

Neighbours: the seam they implement is specgate.backend (a public module, beside this package); below
are figures/ (what a batch's counters and memory say), store/, prompts/, profile/, lifetime/ (every
engine has deadlines and is reaped) and vllm_compat/ (every vLLM internal they touch); above are
checks/, run/ (the session drives them through the host), plugin/ and release/ (the rehearsal's
servers).
"""
