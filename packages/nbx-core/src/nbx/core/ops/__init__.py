"""The op front-ends of nbx.core; each dispatches to the implementation of its operands' backend."""
from .creation import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .linalg import *  # noqa: F401,F403
from .nn import *  # noqa: F401,F403
from .reductions import *  # noqa: F401,F403
