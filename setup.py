from setuptools import setup
setup(name="npu-loss-scale", packages=["npu_loss_scale"])
