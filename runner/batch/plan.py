"""What `ibias plan` says about batch mode: which models would run as provider batches and
which online (with why), and each batch model's cost at its batch price.

Applied to the plan report after it is made, so the report's counting stays one piece of code:
a batch model's estimate is the same tokens priced at its batch price (`batch_discount`),
beside `online_cost_usd`, what the same trials would cost online. Its least time is not
bounded by its online rates (a batch is not paced by them): None, and the sentence says the
provider's window."""

from __future__ import annotations

from typing import Any

from ibias.runner.batch.limits import batch_discount
from ibias.runner.batch.run import batch_models
from ibias.runner.config import Config, ModelConfig

__all__ = ["with_modes"]


def with_modes(config: Config, report: dict[str, Any], forced: bool) -> dict[str, Any]:
    """`report` (planning_report.plan_report's) with each model's `mode` and, for batch
    models, the cost at the batch price; `batch_lines` says which run how."""
    batched, online_lines = batch_models(config, forced)
    by_id = {m.id: m for m in batched}
    lines = [f"model {m.id} runs in batch mode ({_api(m)}, batch price)" for m in batched]
    models: list[dict[str, Any]] = []
    for entry in report["models"]:
        entry = {**entry, "mode": "online", "online_cost_usd": entry["estimated_cost_usd"]}
        m = by_id.get(entry["model_id"])
        if m is not None:
            completion = entry["remaining"] * m.max_tokens
            prompt = entry["estimated_tokens"] - completion
            entry["mode"] = "batch"
            entry["estimated_cost_usd"] = round(batch_discount(m).cost(prompt, completion), 4)
            entry["min_seconds"] = None
            entry["limited_by"] = None
        models.append(entry)
    timed = [m for m in models if m["min_seconds"] is not None]
    slowest = max(timed, key=lambda m: m["min_seconds"], default=None)
    return {
        **report,
        "models": models,
        "estimated_cost_usd": round(sum(m["estimated_cost_usd"] for m in models), 4),
        "online_cost_usd": round(sum(m["online_cost_usd"] for m in models), 4),
        "min_seconds": None if slowest is None else slowest["min_seconds"],
        "slowest_model": None if slowest is None else slowest["model_id"],
        "time_unknown_models": [
            m["model_id"]
            for m in models
            if m["min_seconds"] is None and m["remaining"] and m["mode"] == "online"
        ],
        "batch_lines": [*lines, *online_lines],
    }


def _api(model: ModelConfig) -> str:
    """The batch API's name, as its provider declares it."""
    from ibias.runner.providers.registry import traits_for

    support = traits_for(model.provider).batch
    return model.provider if support is None else support.api
