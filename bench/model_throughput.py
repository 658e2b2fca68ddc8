"""Forward+backward throughput of DeepSummitTransformer at batch 256 (random inputs).

Rows: the spec's base config and the `cpu` profile's model, on CPU (torch threads = 2 unless
--threads says otherwise) and, when CUDA is available, on the GPU in fp32 and under bf16 autocast.
Prints a markdown table. Usage: .venv/bin/python bench/model_throughput.py [--steps N]
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch

from deepsummit.core.config import load_settings
from deepsummit.core.inputs import WEATHER_CHANNELS
from deepsummit.model.config import ModelConfig
from deepsummit.model.summary import count_parameters
from deepsummit.model.transformer import DeepSummitTransformer

BATCH_SIZE = 256


def random_batch(config: ModelConfig, device: torch.device) -> dict[str, torch.Tensor]:
    """Inputs with the dtypes and shapes of FeatureArrays (docs/architecture.md), ~10% missing."""
    b, s, v = BATCH_SIZE, config.n_weather_tokens, config.n_weather_vars
    batch = {
        "numeric": torch.randn(b, config.n_numeric),
        "numeric_missing": torch.rand(b, config.n_numeric) < 0.1,
        "categorical": torch.stack(
            [torch.randint(0, size, (b,)) for size in config.categorical_cardinalities], dim=1
        ),
        "binary": torch.randint(0, 2, (b, config.n_binary)),
        "binary_missing": torch.rand(b, config.n_binary) < 0.1,
        "weather": torch.randn(b, s, v),
        "weather_missing": torch.rand(b, s, v) < 0.1,
        "days_before": torch.rand(b, s) * 90,
        "day_of_year": torch.randint(1, 367, (b, s)).float(),
    }
    return {key: value.to(device) for key, value in batch.items()}


def time_steps(
    config: ModelConfig, device: torch.device, bf16: bool, warmup: int, steps: int
) -> float:
    """Seconds per forward+backward step (loss = BCE with logits, grads zeroed each step)."""
    torch.manual_seed(0)
    model = DeepSummitTransformer(config).to(device).train()
    batch = random_batch(config, device)
    labels = torch.randint(0, 2, (BATCH_SIZE,), device=device).float()
    autocast = (
        torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    )

    def step() -> None:
        model.zero_grad(set_to_none=True)
        with autocast:
            logits = model(**batch)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits.float(), labels)
        loss.backward()

    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads on CPU")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per row")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per row")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    cpu_profile = load_settings("cpu").model
    base = ModelConfig(n_weather_vars=len(WEATHER_CHANNELS))  # the arrays' 16 channels
    configs = {
        "base (spec)": base,
        f"cpu profile (H={cpu_profile.hidden_size}, L={cpu_profile.num_layers})": (
            cpu_profile.with_inputs({"n_weather_vars": base.n_weather_vars})
        ),
    }
    runs = [(torch.device("cpu"), False)]
    if torch.cuda.is_available():
        runs += [(torch.device("cuda"), False), (torch.device("cuda"), True)]

    print(f"batch {BATCH_SIZE}, forward+backward, {args.warmup} warm-up + {args.steps} timed steps")
    print(f"torch {torch.__version__}, CPU threads {torch.get_num_threads()}")
    print()
    print("| config | params | device | dtype | samples/s | ms/step |")
    print("| --- | ---: | --- | --- | ---: | ---: |")
    for name, config in configs.items():
        params = count_parameters(DeepSummitTransformer(config))
        for device, bf16 in runs:
            seconds = time_steps(config, device, bf16, args.warmup, args.steps)
            label = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
            dtype = "bf16 autocast" if bf16 else "fp32"
            print(
                f"| {name} | {params:,} | {label} | {dtype} "
                f"| {BATCH_SIZE / seconds:,.0f} | {seconds * 1000:,.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
