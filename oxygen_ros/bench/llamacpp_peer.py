"""llama.cpp's side of `bench --suite peers`, run by the peers venv's Python (``make peers``), never imported.

It needs only the standard library, numpy and ``llama_cpp``, so it runs outside our venv: a JSON job on stdin (the
GGUF file, threads, and the same prompt token ids our engine and transformers get), a JSON result on stdout.  Two
ways of serving N questions, greedy, exactly ``new_tokens`` tokens each:

* one at a time, the way a llama_ros node serves: the prompt cache keeps the longest common prefix of the previous
  request (``Llama.generate`` with ``reset=True``), so the shared observation is prefilled once per run;
* parallel sequences, the way llama.cpp's own ``parallel`` example and its server's slots batch: one context with
  N sequences in a unified KV cache, the shared prefix decoded once and shared by every sequence
  (``llama_memory_seq_cp``), the question tails in one batch, then one batch of N tokens per step.

Then its quality teacher-forced: the logits of a text's tokens against our fp32 path's log-probabilities (a ``.npy``
file the job names).
"""

import ctypes
import json
import sys
import time

import numpy as np

try:
    import llama_cpp
except ImportError as exc:  # run by the peers venv only (make peers); never a dependency of the package
    raise SystemExit("llamacpp_peer needs llama-cpp-python: run it with the peers venv (make peers)") from exc


def _decode(llm, prompt: list[int], new_tokens: int) -> tuple[float, float, list[int]]:
    """(seconds to the first token, seconds to the last, the tokens) of one greedy request."""
    start = time.perf_counter()
    first, tokens = 0.0, []
    for token in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
        tokens.append(int(token))
        if len(tokens) == 1:
            first = time.perf_counter() - start
        if len(tokens) == new_tokens:
            break
    return first, time.perf_counter() - start, tokens


def _parallel(model_path: str, threads: int, prompts: list[list[int]], new_tokens: int) -> dict:
    """N sequences decoded together (see the module docstring): run seconds and each sequence's first-token time."""
    ll = llama_cpp
    n = len(prompts)
    common = 0
    while all(len(p) > common + 1 and p[common] == prompts[0][common] for p in prompts):
        common += 1
    model = ll.llama_model_load_from_file(model_path.encode(), ll.llama_model_default_params())
    params = ll.llama_context_default_params()
    params.n_ctx = common + sum(len(p) - common for p in prompts) + n * new_tokens + 64
    params.n_batch = params.n_ubatch = 512
    params.n_seq_max = n
    params.kv_unified = True
    params.n_threads = params.n_threads_batch = threads
    ctx = ll.llama_init_from_model(model, params)
    vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(model))
    memory = ll.llama_get_memory(ctx)
    batch = ll.llama_batch_init(512, 0, n)

    def decode(entries: list[tuple[int, int, list[int], bool]]) -> list[int]:
        """(token, position, sequences, wants logits) in chunks of n_batch; argmax of each entry wanting logits."""
        chosen = []
        for first in range(0, len(entries), 512):
            chunk = entries[first : first + 512]
            batch.n_tokens = len(chunk)
            for i, (token, pos, seqs, logits) in enumerate(chunk):
                batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, len(seqs), logits
                for j, seq in enumerate(seqs):
                    batch.seq_id[i][j] = seq
            if ll.llama_decode(ctx, batch):
                raise RuntimeError("llama_decode failed")
            for i, (_, _, _, logits) in enumerate(chunk):
                if logits:
                    row = np.ctypeslib.as_array(ctypes.cast(ll.llama_get_logits_ith(ctx, i),
                                                            ctypes.POINTER(ctypes.c_float)), shape=(vocab,))
                    chosen.append(int(row.argmax()))
        return chosen

    start = time.perf_counter()
    decode([(t, pos, [0], False) for pos, t in enumerate(prompts[0][:common])])
    for seq in range(1, n):
        ll.llama_memory_seq_cp(memory, 0, seq, -1, -1)
    tails = [(t, common + i, [seq], common + i == len(p) - 1) for seq, p in enumerate(prompts)
             for i, t in enumerate(p[common:])]
    tokens = decode(tails)
    ttft = [time.perf_counter() - start] * n
    answers = [[t] for t in tokens]
    positions = [len(p) for p in prompts]
    for _ in range(new_tokens - 1):
        tokens = decode([(t, positions[seq], [seq], True) for seq, t in enumerate(tokens)])
        positions = [p + 1 for p in positions]
        for answer, t in zip(answers, tokens):
            answer.append(t)
    seconds = time.perf_counter() - start
    ll.llama_batch_free(batch)
    ll.llama_free(ctx)
    ll.llama_model_free(model)
    return {"n": n, "seconds": seconds, "ttft_s": ttft, "tokens": answers}


def _teacher_forced(job: dict) -> dict:
    """Next-token scores of the text's tokens in one evaluation (logits at every position) against our fp32 path's
    log-probabilities (``reference``, [tokens - 1, vocab]): the share of positions with the same most likely next
    token, and the mean KL(fp32 || llama.cpp) in nats per token."""
    ids, reference = job["teacher_forced"]["ids"], np.load(job["teacher_forced"]["reference"]).astype(np.float64)
    llm = llama_cpp.Llama(job["gguf"], n_ctx=job["n_ctx"], n_threads=job["threads"], n_batch=512, logits_all=True,
                          verbose=False)  # fmt: skip
    llm.eval(ids)
    logits = np.asarray(llm.scores[: len(ids) - 1], dtype=np.float64)  # position i scores token i + 1
    top = logits.max(axis=1, keepdims=True)
    logprobs = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    kl = float((np.exp(reference) * (reference - logprobs)).sum(axis=1).mean())
    return {"top1": float((logprobs.argmax(axis=1) == reference.argmax(axis=1)).mean()), "kl": kl, "tokens": len(ids)}


def main() -> int:
    job = json.load(sys.stdin)
    llm = llama_cpp.Llama(job["gguf"], n_ctx=job["n_ctx"], n_threads=job["threads"], n_batch=512, verbose=False)
    _decode(llm, job["batch1"]["prompt"][:8], 4)  # warm up
    best = 0.0
    for _ in range(job["batch1"]["repeats"]):  # the fastest of a few, as for every peer
        llm.reset()
        first, total, _ = _decode(llm, job["batch1"]["prompt"], job["batch1"]["new_tokens"])
        best = max(best, (job["batch1"]["new_tokens"] - 1) / (total - first))
    result = {"batch1_decode_tokens_per_s": best, "shared": []}
    for run in job["shared"]:
        llm.reset()  # each run prefills its observation once, like ours
        start = time.perf_counter()
        ttfts, answers = [], []
        for prompt in run["prompts"]:
            begun = time.perf_counter() - start
            first, _, tokens = _decode(llm, prompt, run["new_tokens"])
            ttfts.append(begun + first)  # a request waits for those before it: one at a time
            answers.append(tokens)
        seconds = time.perf_counter() - start
        result["shared"].append({"n": len(run["prompts"]), "seconds": seconds, "ttft_s": ttfts, "tokens": answers})
        result.setdefault("parallel", []).append(_parallel(job["gguf"], job["threads"], run["prompts"],
                                                           run["new_tokens"]))  # fmt: skip
    result["teacher_forced"] = _teacher_forced(job)
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
