"""A Flower simulation of the smoke setting with the recovery-factor strategy.

    python examples/flower_smoke.py                 # 4 rounds, no mask
    python examples/flower_smoke.py --rounds 2 --mask-keep-prob 0.5

Needs the optional extra: pip install -e '.[flower]'. Synthetic images, 10 clients, 3 a round:
it shows the plumbing; its numbers mean nothing.
"""

import argparse

import torch

from maskfed.engine.config import ConfigError, load_profile
from maskfed.integrations import flower


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="FedAvg rounds (default 4)")
    parser.add_argument("--mask-keep-prob", type=float, default=None, help="keep probability p of a shared block mask")
    args = parser.parse_args()
    if args.mask_keep_prob is not None and not 0 < args.mask_keep_prob <= 1:
        parser.error(f"--mask-keep-prob must lie in (0, 1]; got {args.mask_keep_prob}")
    try:
        cfg = load_profile("smoke", rounds=args.rounds).run(0)  # validated before anything starts
    except ConfigError as exc:
        parser.error(str(exc))
    torch.set_num_threads(1)
    sim = flower.simulate(cfg, mask_keep_prob=args.mask_keep_prob)
    print(flower.history_table(sim.strategy).to_string(float_format=lambda v: f"{v:.4g}"))


if __name__ == "__main__":
    main()
