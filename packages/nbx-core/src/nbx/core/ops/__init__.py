"""The op front-ends of nbx.core; each dispatches to the implementation of its operands' backend."""
from .activations import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .creation import *  # noqa: F401,F403
from .datamove import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .gather import *  # noqa: F401,F403
from .linalg import *  # noqa: F401,F403
from .products import *  # noqa: F401,F403
from .nn import *  # noqa: F401,F403
from .norms import *  # noqa: F401,F403
from .reductions import *  # noqa: F401,F403
from .reductions_more import *  # noqa: F401,F403
from .rotary import *  # noqa: F401,F403
from .scans import *  # noqa: F401,F403
from .sorting import *  # noqa: F401,F403
