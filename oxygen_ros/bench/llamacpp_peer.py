"""llama.cpp's side of `bench --suite peers`, run by the peers venv's Python (``make peers``), never imported.

It needs only the standard library and ``llama_cpp``, so it runs outside our venv: a JSON job on stdin (the GGUF
file, threads, and the same prompt token ids our engine and transformers get), a JSON result on stdout.  llama.cpp
serves one request at a time here, the way a llama_ros node does; its prompt cache keeps the longest common prefix of
the previous request (``Llama.generate`` with ``reset=True``), so the shared observation is prefilled once per run,
as in ours.  Greedy (top_k=1), exactly ``new_tokens`` tokens per request (EOS does not stop a generate loop).
"""

import json
import sys
import time


def _decode(llm, prompt: list[int], new_tokens: int) -> tuple[float, float]:
    """(seconds to the first token, seconds to the last) of one greedy request."""
    start = time.perf_counter()
    first = 0.0
    for count, _ in enumerate(llm.generate(prompt, top_k=1, temp=0.0, reset=True), start=1):
        if count == 1:
            first = time.perf_counter() - start
        if count == new_tokens:
            break
    return first, time.perf_counter() - start


def main() -> int:
    from llama_cpp import Llama

    job = json.load(sys.stdin)
    llm = Llama(job["gguf"], n_ctx=job["n_ctx"], n_threads=job["threads"], n_batch=512, verbose=False)
    _decode(llm, job["batch1"]["prompt"][:8], 4)  # warm up
    llm.reset()
    first, total = _decode(llm, job["batch1"]["prompt"], job["batch1"]["new_tokens"])
    result = {"batch1_decode_tokens_per_s": (job["batch1"]["new_tokens"] - 1) / (total - first), "shared": []}
    for run in job["shared"]:
        llm.reset()  # each run prefills its observation once, like ours
        start = time.perf_counter()
        ttfts = []
        for prompt in run["prompts"]:
            begun = time.perf_counter() - start
            first, _ = _decode(llm, prompt, run["new_tokens"])
            ttfts.append(begun + first)  # a request waits for those before it: one at a time
        seconds = time.perf_counter() - start
        result["shared"].append({"n": len(run["prompts"]), "seconds": seconds, "ttft_s": ttfts})
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
