"""What a config needs of an accelerator this machine does not have: memory a device, what
fits, FLOPs and time, from its train step compiled for compile-only devices.

    python -m transformer_jax.plan --config=configs/big.py --devices=h100:8 \
        [--mfu=0.4] [--json] [--config.FIELD=VALUE ...]

``--devices`` is NAME:COUNT or NAME:HOSTSxCOUNT (h100:8, h100:2x4, v5e:8; the names are
:data:`transformer_jax.planning.accelerators.ACCELERATORS`'). Needs the ``aot`` extra
(``pip install -e '.[aot]'``). The library is :mod:`transformer_jax.planning.planner`.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

# The planner compiles only: JAX's GPU and TPU plugins must not start a device (set before
# JAX is imported).
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from transformer_jax import cli  # noqa: E402


def main(argv: list[str], flags_: dict[str, Any]) -> None:
    import jax

    from transformer_jax.errors import UserError
    from transformer_jax.planning import accelerators, planner
    from transformer_jax.training.spec import TrainingSpec

    cli.no_extra_args(argv)
    # A compile-only executable is not one to keep in JAX's persistent cache: what it holds
    # (the compiled module, its memory figures) is what the planner reads.
    jax.config.update("jax_enable_compilation_cache", False)
    with cli.clean_errors():
        spec = TrainingSpec.from_config(cli.flag_config(flags_["config"]))  # validated
        target = accelerators.parse(flags_["devices"].value)
        mfu = flags_["mfu"].value
        if not 0 < mfu <= 1:
            raise UserError(f"--mfu={mfu}: a fraction in (0, 1]")
        if target.count % spec.loop.model_parallel:
            raise UserError(f"train.model_parallel={spec.loop.model_parallel} does not "
                            f"divide the {target.count} devices of --devices={target}")
        accelerators.devices_of(target)  # a missing plugin is named before compiling
        result = planner.plan(spec, target, mfu)
        if flags_["json"].value:
            print(json.dumps(planner.as_dict(result)))
            return
        for line in planner.describe(result, spec):
            print(line)


if __name__ == "__main__":
    from absl import flags

    from transformer_jax.planning.planner import DEFAULT_MFU

    devices_flag = flags.DEFINE_string("devices", None, "NAME:COUNT or NAME:HOSTSxCOUNT of "
                                       "compile-only devices, e.g. h100:8")
    flags.mark_flag_as_required("devices")
    cli.run(functools.partial(main, flags_={
        "config": cli.define_config_flag(),
        "devices": devices_flag,
        "mfu": flags.DEFINE_float("mfu", DEFAULT_MFU, "Model-FLOPs utilisation the times "
                                  "assume."),
        "json": flags.DEFINE_bool("json", False, "Print the figures as one JSON line."),
    }))
