"""The op front-ends of nbx.core; each dispatches to the implementation of its operands' backend."""
from .activations import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .bands import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .creation import *  # noqa: F401,F403
from .datamove import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .gather import *  # noqa: F401,F403
from .linalg import *  # noqa: F401,F403
from .manipulation import *  # noqa: F401,F403
from .moe import *  # noqa: F401,F403
from .products import *  # noqa: F401,F403
from .einsum import *  # noqa: F401,F403
from .nn import *  # noqa: F401,F403
from .norms import *  # noqa: F401,F403
from .paged import *  # noqa: F401,F403
from .pooling import *  # noqa: F401,F403
from .reductions import *  # noqa: F401,F403
from .resample import *  # noqa: F401,F403
from .reductions_more import *  # noqa: F401,F403
from .rotary import *  # noqa: F401,F403
from .sampling import *  # noqa: F401,F403
from .scans import *  # noqa: F401,F403
from .sorting import *  # noqa: F401,F403
from .spectral import *  # noqa: F401,F403
from .windows import *  # noqa: F401,F403

from ._common import accepts_axis as _accepts_axis

# every op that takes dim= (torch's spelling) takes numpy's axis= too, and keepdims= for keepdim=
for _name, _fn in list(globals().items()):
    if not _name.startswith("_") and callable(_fn) and not isinstance(_fn, type):
        globals()[_name] = _accepts_axis(_fn)
