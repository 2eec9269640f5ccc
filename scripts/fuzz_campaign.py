"""Seeded fuzz campaign: no overflowed update ever reaches a variable, the scale state stays exact.

Every case is drawn from ``(seed, case index)`` alone: a front end (``NPULossScaleOptimizer`` in a
v1 graph or a ``tf.function``, with or without gradient accumulation; the Megatron
mixed-precision optimizer with a Megatron scaler; the torch-style ``GradScaler``; the Keras
``NpuLossScaleOptimizer``), a small random model (dense variables and, where the front end takes
them, an embedding with sparse gradients), a compute dtype (float16, bfloat16, float32), an
inner optimizer (SGD, Momentum, Adam, AdamW-style decay through ``ParamGroupOptimizer`` and
``OptimizerParamScheduler``), optional global-norm clipping, a loss-scale rule and its
parameters. Each case builds its graph or function once and runs many steps; at random steps,
tensors and micro-batches it injects an overflow of a random kind:

* ``inf`` / ``nan``: a coefficient of one variable's term becomes inf / NaN (the gradient
  overflows);
* ``saturated``: a term's forward value overflows and saturation turns it into ±MAX of the
  compute dtype (±65504 for float16): every value stays finite, only the register knows;
* ``register``: the emulated float-status register is set and no value is touched;
* ``cond``: a forward-only overflow (saturated) inside a ``tf.cond`` branch.

The model's loss is linear in every variable, so the scaled gradient of each step is known in
closed form: a step is expected to overflow when an overflow was injected into it (or into any
micro-batch of its accumulation group) or when the scale itself is beyond the compute dtype's
range; steps within 1 % of that bound are "ambiguous" (the twin then follows the observed
decision, and they are counted).

After every step it checks: a skipped step (and a micro-batch that does not complete an
accumulation group) left every model variable, optimizer slot, optimizer counter and
``global_step`` / iteration counter bit-for-bit unchanged; an applied step matches a NumPy
update (SGD, Momentum, Adam; dense and sparse) or, for the decayed AdamW-style groups, changed
the variables; every variable is finite; ``global_step`` / ``iterations`` / the scheduler's
``num_steps`` moved only on applied steps; the loss-scale state (scale and counters) equals a
pure-Python twin of the rule (``fuzz_twins.py``), sharing no code with the package.

On TensorFlow 1.15 (the device's TF1 stack) it draws the front ends TF1 scripts have there: the
v1 graph ``NPULossScaleOptimizer`` (with and without accumulation) and the Megatron optimizer,
run in 1.15's default graph mode as on the device, and ``GradScaler``, eager (1.15 turns eager
execution on only at a program's start, so those cases run together in a second process).

The parts, beside this script: ``fuzz_cases.py`` (what is drawn, the schedule, the model),
``fuzz_twins.py`` (dtype rounding, the twins), ``fuzz_checks.py`` (the NumPy reference, the
checks, the tally), ``fuzz_checkpoints.py`` (tampered checkpoints), ``fuzz_runners.py`` (one
case's run; the v1 graph front ends) and ``fuzz_eager_runners.py`` (the eager and tf.function
front ends).

    python scripts/fuzz_campaign.py --seed 0 --steps 10000        # the full campaign
    python scripts/fuzz_campaign.py --seed 0 --steps 300          # a short slice
    python scripts/fuzz_campaign.py --seed 0 --case 17 --verbose  # one case again

It prints the counts (steps, overflows injected, skipped, applied, mismatches) and exits 1 when
any mismatch was found, after printing each failing case's parameters.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("NPU_LOSS_SCALE_BACKEND", "emulation")

import tensorflow as tf  # noqa: E402

# the campaign's parts, beside this script (tests reach them through this module too)
from fuzz_cases import (  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import
    EAGER_FRONTENDS_TF1, EXTREMES, FRONTENDS, FRONTENDS_TF1, NOT_ON_TF1, TF1,
    available_frontends, make_case, make_schedule)
from fuzz_checks import Tally, scaled_product  # noqa: E402,F401  pylint: disable=C0413,W0611
from fuzz_eager_runners import (  # noqa: E402  pylint: disable=wrong-import-position
    GradScalerRunner, KerasRunner, NpuFunctionRunner)
from fuzz_runners import NpuGraphRunner  # noqa: E402  pylint: disable=wrong-import-position
from fuzz_twins import KerasTwin, round_to  # noqa: E402,F401  pylint: disable=C0413,W0611

RUNNERS = {"npu_graph": NpuGraphRunner, "npu_function": NpuFunctionRunner,
           "megatron": NpuGraphRunner, "grad_scaler": GradScalerRunner, "keras": KerasRunner}


# ---------------------------------------------------------------------------------------------
# The campaign
# ---------------------------------------------------------------------------------------------
def run_case(case, tally, verbose=False):
    import npu_loss_scale as nls  # pylint: disable=import-outside-toplevel
    nls.set_device_sat_mode(nls.emulation.SATURATION)
    before = tally.mismatches
    runner = RUNNERS[case["frontend"]](nls, case, tally, verbose)
    runner.run()
    if verbose or tally.mismatches > before:
        print("case %d %s: %d steps, %d applied, %d skipped, %d mismatches"
              % (case["case"], case["frontend"], case["steps"], runner.applied, runner.skipped,
                 tally.mismatches - before), flush=True)
    return runner


def plan_cases(seed, steps, frontends=None, cases=None, steps_per_case=None):
    """The cases of campaign ``seed`` that make ``steps`` optimizer steps (the last case cut
    short), or only the case indices in ``cases``."""
    if cases is not None:
        return [make_case(seed, index, frontends, steps_per_case) for index in cases]
    plan, total = [], 0
    while total < steps:
        case = make_case(seed, len(plan), frontends, steps_per_case)
        case["steps"] = min(case["steps"], steps - total)
        plan.append(case)
        total += case["steps"]
    return plan


def runs_elsewhere(case):
    """Does ``case`` need eager execution that this process, in TF 1.15's graph mode, lacks?"""
    return TF1 and case["frontend"] in EAGER_FRONTENDS_TF1 and not tf.executing_eagerly()


def run_elsewhere(cases, tally, verbose=False):
    """Runs ``cases`` in a child process of this script with eager execution on (TF 1.15 turns it
    on only at a program's start) and adds the child's tally to ``tally``."""
    import subprocess  # pylint: disable=import-outside-toplevel
    folder = tempfile.mkdtemp(prefix="nls-fuzz-eager-")
    try:
        result = os.path.join(folder, "tally.json")
        command = [sys.executable, os.path.abspath(__file__), "--eager-child", result]
        if verbose:
            command.append("--verbose")
        done = subprocess.run(command, input=json.dumps(cases).encode(), check=False)
        if not os.path.exists(result):
            raise RuntimeError("the eager process for %d case(s) (%s) exited with status %d "
                               "and no tally" % (len(cases), ", ".join(
                                   str(c["case"]) for c in cases), done.returncode))
        with open(result) as handle:
            tally.add(json.load(handle))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_campaign(seed=0, steps=10000, frontends=None, cases=None, verbose=False,
                 steps_per_case=None, out=sys.stdout):
    """Runs cases of campaign ``seed`` until ``steps`` optimizer steps have run (or only the
    case indices in ``cases``). Returns the Tally."""
    tally = Tally()
    start = time.time()
    elsewhere = run_cases(plan_cases(seed, steps, frontends, cases, steps_per_case), tally,
                          verbose)
    tally.seconds = time.time() - start
    report(tally, seed, out, eager_process=elsewhere)
    return tally


def run_cases(cases, tally, verbose=False):
    """Runs ``cases`` in order, here, except those that need eager execution on TF 1.15's graph
    mode: these run after the others, together in one eager process. Returns how many did."""
    for case in cases:
        if not runs_elsewhere(case):
            run_case(case, tally, verbose)
    elsewhere = [case for case in cases if runs_elsewhere(case)]
    if elsewhere:
        run_elsewhere(elsewhere, tally, verbose)
    return len(elsewhere)


def report(tally, seed, out=sys.stdout, eager_process=False):
    print("fuzz campaign seed %d: TensorFlow %s, %.0f s" % (seed, tf.__version__, tally.seconds),
          file=out)
    if eager_process:
        print("  (%s cases ran in a second process with eager execution)"
              % ", ".join(EAGER_FRONTENDS_TF1), file=out)
    print("  cases %d, steps %d (micro-batches %d), overflows injected %d, skipped %d, "
          "applied %d (checked against NumPy %d), "
          "natural overflows %d, ambiguous %d, mismatches %d"
          % (tally.cases, tally.steps, tally.micro_batches, tally.injected, tally.skipped,
             tally.applied, tally.reference_checked, tally.natural,
             tally.ambiguous, tally.mismatches), file=out)
    print("  injected by kind: " + ", ".join("%s %d" % kv for kv in tally.by_kind.items()),
          file=out)
    print("  cases at an extreme: " + ", ".join("%s %d" % (k, tally.extremes.get(k, 0))
                                               for k in EXTREMES)
          + "; tampered checkpoints restored %d; torch habits refused %d"
          % (tally.tampered, tally.habits), file=out)
    for name, fe in sorted(tally.by_frontend.items()):
        print("  %-13s cases %4d  steps %6d  injected %5d  skipped %5d"
              % (name, fe["cases"], fe["steps"], fe["injected"], fe["skipped"]), file=out)
    for failure in tally.failures:
        print("MISMATCH step %d: %s\n  case: %s" % (failure["step"], failure["what"],
                                                   json.dumps(failure["case"])), file=out)
    out.flush()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=10000, help="total optimizer steps")
    parser.add_argument("--case", type=int, action="append", dest="cases",
                        help="run only this case index (repeatable)")
    parser.add_argument("--frontends", default=",".join(available_frontends()),
                        help="comma-separated subset of " + ",".join(available_frontends()))
    parser.add_argument("--steps-per-case", type=int, default=None)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--eager-child", metavar="TALLY_JSON", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.eager_child:
        return eager_child(args.eager_child, args.verbose)
    frontends = [f for f in args.frontends.split(",") if f]
    for f in frontends:
        if TF1 and f in NOT_ON_TF1:
            parser.error("--frontends: %r does not exist on TensorFlow %s (%s); accepted there: "
                         "%s" % (f, tf.__version__, NOT_ON_TF1[f], ", ".join(FRONTENDS_TF1)))
        if f not in FRONTENDS:
            parser.error("--frontends: unknown front end %r; accepted: %s"
                         % (f, ", ".join(available_frontends())))
    tally = run_campaign(args.seed, args.steps, frontends, args.cases, args.verbose,
                         args.steps_per_case)
    return 1 if tally.mismatches else 0


def eager_child(result, verbose):
    """The second process of ``run_elsewhere``: eager execution on, the cases (JSON) read from
    stdin and run, the tally written to ``result``."""
    tf.compat.v1.enable_eager_execution()
    tally = Tally()
    for case in json.load(sys.stdin):
        run_case(case, tally, verbose)
    with open(result, "w") as handle:
        handle.write(tally.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
