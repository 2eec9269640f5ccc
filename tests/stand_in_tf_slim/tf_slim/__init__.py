"""Stand-in tf_slim (tests only)."""
from tf_slim.ops.arg_scope import add_arg_scope, arg_scope  # noqa: F401
