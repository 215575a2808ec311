"""After a step: each sampled token into its request, whether the request is done and why, and its answer.

Finish reasons (``RequestOutput.finish_reason``): ``stop`` (an end-of-turn or stop token, or a stop string in the
text), ``length`` (max_new_tokens or the context), ``actions`` (an action chunk, for a request that wants no text),
``abort`` (cancelled), ``deadline`` (dropped when its deadline passed); one list, ``io.FINISH_REASONS``. A constrained
answer ends ``stop`` when its grammar is complete. A request whose deadline passed is answered
DEADLINE_EXCEEDED whatever its reason, so a caller never mistakes a late action chunk for a timely one.
"""

from dataclasses import replace

from oxygen_ros.engine.io import RequestOutput, TokenLogprob
from oxygen_ros.engine.request import Request
from oxygen_ros.errors import ErrorCode
from oxygen_ros.models.tokenizer import Tokenizer


class OutputProcessor:
    def __init__(self, tokenizer: Tokenizer, max_model_len: int) -> None:
        self.tokenizer, self.max_model_len = tokenizer, max_model_len

    def on_token(self, req: Request, token: int) -> str:
        """Append ``token`` to ``req``; the reason it finishes with it ('' = it goes on)."""
        req.append_output(token)
        if req.matcher is not None and (not req.matcher.consume_token(token) or req.matcher.is_stopped()):
            return "stop"  # the grammar is complete (or past its per-token bound: ``output`` says so)
        s = req.sampling
        if token in s.stop_token_ids or (not s.ignore_eos and token in self.tokenizer.eos_token_ids):
            return "stop"
        if s.stop and req.detokenizer.feed(req.output_token_ids):
            return "stop"
        if len(req.output_token_ids) >= s.max_new_tokens or req.num_tokens >= self.max_model_len:
            return "length"
        return ""

    def _spelt(self, logprob: TokenLogprob) -> TokenLogprob:
        def spell(token: int) -> str:  # a piece of a multi-byte character decodes to U+FFFD, as in OpenAI's API
            return self.tokenizer.decode([token], skip_special_tokens=False)

        return replace(logprob, token=spell(logprob.token_id), top_tokens=[spell(i) for i in logprob.top_ids])

    def output(self, req: Request) -> RequestOutput:
        """The finished request's answer: its text (cut before a stop string), tokens, actions and timings."""
        start = req.first_scheduled_s or req.finished_s
        text = req.detokenizer.final_text(req.output_token_ids) if req.detokenizer is not None else ""
        out = RequestOutput(
            request_id=req.request_id,
            task_id=req.task_id,
            task_type=req.task_type,
            text=text,
            token_ids=list(req.output_token_ids),
            finish_reason=req.finish_reason,
            prompt_tokens=req.num_prompt_tokens,
            reused_prefix_tokens=req.num_cached_tokens,
            reused_image_tokens=req.num_cached_image_tokens,
            generated_tokens=len(req.output_token_ids),
            queue_ms=(start - req.arrival_s) * 1e3,
            latency_ms=(req.finished_s - req.arrival_s) * 1e3,
            actions=None if req.actions is None else req.actions.cpu().numpy(),
            logprobs=[self._spelt(lp) for lp in req.output_logprobs],
        )
        if req.matcher is not None and req.matcher.is_error():
            out.error_code = ErrorCode.OUT_OF_RANGE  # the grammar's per-token bound ran out (llguidance's limits)
            out.message = f"the constraint became too complex to follow: {req.matcher.get_error()[:300]}"
        if req.deadline and req.finished_s > req.deadline:
            out.error_code = ErrorCode.DEADLINE_EXCEEDED
            late_ms = (req.finished_s - req.deadline) * 1e3
            out.message = (
                f"dropped {late_ms:.1f} ms after its deadline passed, {out.generated_tokens} tokens generated"
                if req.finish_reason == "deadline"
                else f"finished {late_ms:.1f} ms after its deadline (its result is kept, but late)"
            )
        return out
