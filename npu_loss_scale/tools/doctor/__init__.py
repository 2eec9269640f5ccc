"""Layer 5, a unit of tools: the overflow doctor's analysis (``npu-loss-scale doctor``, the
command in :mod:`npu_loss_scale.cli.doctor`). Over a built TF1 graph: whether an overflow site
can reach the loss or the applied gradients (:mod:`.verdicts`); over the runs' records: the
report of schema version 1, its sites, findings and terminal summary (:mod:`.report`,
:mod:`.site_findings`, :mod:`.summary`); the configuration and mode findings
(:mod:`.config_findings`, :mod:`.mode_findings`)."""
__all__ = []  # a namespace: see its modules
