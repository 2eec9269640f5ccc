"""Layer 0: what every other layer uses and nothing of the package: argument checks, per-graph
state, all-or-nothing restores, warnings and logging, TensorFlow-version compatibility, the fused
kernel, the probe for a real ``npu_bridge``. Not public: names here may change in any release."""
