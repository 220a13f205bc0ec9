"""The Tensor: storage + dtype + shape + strides (in elements) + offset, on one device.

Views share storage and change only the layout. Arithmetic operators and the method forms of the
ops are installed from nbx.core.operators, so that each op has one front-end.
"""
from __future__ import annotations

from math import prod

import numpy as np

from . import deferred_checks, dtypes, layout
from .layout import as_c_contiguous
from .device import _BACKENDS, CPU, Device, as_device, get_backend
from .dispatch import _OBSERVER
from .dispatch import observer as work_observer
from .dtypes import DType
from .errors import IndexingError, NotSupportedError, ShapeError, UnknownDTypeError, ViewError
from .storage import Storage, host_bytes


class Tensor:
    __slots__ = ("_storage", "dtype", "shape", "_strides", "_offset", "__weakref__")

    def __init__(self, storage: Storage, dtype: DType, shape, strides=None, offset: int = 0):
        self._storage = storage
        self.dtype = dtypes.as_dtype(dtype)
        self.shape = layout.as_shape(shape)
        self._strides = layout.contiguous_strides(self.shape) if strides is None else tuple(strides)
        self._offset = int(offset)

    @classmethod
    def _of(cls, storage: Storage, dtype: DType, shape: tuple, strides: tuple, offset: int = 0) -> "Tensor":
        """A tensor of a layout its maker already checked (the launch path's outputs): no validation."""
        t = object.__new__(cls)
        t._storage, t.dtype, t.shape, t._strides, t._offset = storage, dtype, shape, strides, offset
        return t

    # ---- facts -----------------------------------------------------------------------------
    @property
    def device(self) -> Device:
        return self._storage.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements (the Array API's attribute); numel() says the same."""
        return prod(self.shape)

    def numel(self) -> int:
        return prod(self.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in elements, not bytes."""
        return self._strides

    def stride(self, dim: int | None = None):
        return self._strides if dim is None else self._strides[layout.normalize_dim(dim, self.ndim)]

    @property
    def storage_offset(self) -> int:
        return self._offset

    @property
    def storage(self) -> Storage:
        return self._storage

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def data_ptr(self) -> int:
        return self._storage.data_ptr() + self._offset * self.dtype.itemsize

    def is_contiguous(self) -> bool:
        return layout.is_contiguous(self.shape, self._strides)

    def _view(self, shape, strides, offset=None) -> "Tensor":
        return Tensor(self._storage, self.dtype, shape, strides, self._offset if offset is None else offset)

    # ---- views -----------------------------------------------------------------------------
    def view(self, *shape) -> "Tensor":
        if len(shape) == 1 and isinstance(shape[0], (DType, str)):
            raise NotSupportedError("view(dtype) reinterpretation is not supported; use to(dtype=)")
        new_shape = layout.infer_shape(layout.shape_args(shape), self.size)
        strides = layout.view_strides(self.shape, self._strides, new_shape)
        if strides is None:
            raise ViewError(
                f"view{new_shape} of a tensor of shape {self.shape} and strides {self._strides} "
                f"would need a copy; use reshape(), which copies only then")
        return Tensor._of(self._storage, self.dtype, new_shape, tuple(strides), self._offset)  # checked above

    def reshape(self, *shape) -> "Tensor":
        new_shape = layout.infer_shape(layout.shape_args(shape), self.size)
        strides = layout.view_strides(self.shape, self._strides, new_shape)
        if strides is None:
            return self.contiguous().view(new_shape)
        return Tensor._of(self._storage, self.dtype, new_shape, tuple(strides), self._offset)  # checked above

    def permute(self, *dims) -> "Tensor":
        dims, n = layout.shape_args(dims), len(self.shape)
        order = [d if type(d) is int and 0 <= d < n else layout.normalize_dim(d, n) for d in dims]
        if sorted(order) != list(range(n)):
            raise ShapeError(f"permute{tuple(dims)} is not a permutation of {n} dims")
        shape, strides = self.shape, self._strides   # list displays: a view is a hot path (every conv output)
        return Tensor._of(self._storage, self.dtype, tuple([shape[d] for d in order]),   # checked above
                          tuple([strides[d] for d in order]), self._offset)

    def transpose(self, dim0: int, dim1: int) -> "Tensor":
        ndim = len(self.shape)
        a, b = layout.normalize_dim(dim0, ndim), layout.normalize_dim(dim1, ndim)
        if ndim == 0:
            return self._view((), ())
        shape, strides = list(self.shape), list(self._strides)
        shape[a], shape[b], strides[a], strides[b] = shape[b], shape[a], strides[b], strides[a]
        # two dims of a checked layout swapped (x @ W.T, every call): no permutation to check
        return Tensor._of(self._storage, self.dtype, tuple(shape), tuple(strides), self._offset)

    swapaxes = transpose

    @property
    def T(self) -> "Tensor":
        if self.ndim != 2:
            raise ShapeError(f".T needs a 2-D tensor (the Array API rule), got {self.ndim}-D; use .mT or permute")
        return self.transpose(0, 1)

    @property
    def mT(self) -> "Tensor":
        if self.ndim < 2:
            raise ShapeError(f".mT needs at least 2 dims, got {self.ndim}")
        return self.transpose(-2, -1)

    def expand(self, *shape) -> "Tensor":
        shape = layout.shape_args(shape)
        lead = len(shape) - self.ndim
        if lead < 0:
            raise ShapeError(f"expand{tuple(shape)} has fewer dims than the tensor's {self.shape}")
        target = tuple(
            (self.shape[i - lead] if i >= lead else None) if s == -1 else s for i, s in enumerate(shape))
        if None in target:
            raise ShapeError(f"expand{tuple(shape)}: -1 is not allowed for a new leading dim")
        return self._view(target, layout.broadcast_strides(self.shape, self._strides, target))

    def broadcast_to(self, shape) -> "Tensor":
        return self.expand(*layout.as_shape(shape))

    def squeeze(self, dim=None) -> "Tensor":
        if dim is None:
            dims = [d for d, s in enumerate(self.shape) if s == 1]
        else:
            dims = layout.normalize_dims(dim, self.ndim)
            if any(self.shape[d] != 1 for d in dims):
                raise ShapeError(f"squeeze({dim}): dims of shape {self.shape} that are not of size 1")
        keep = [d for d in range(self.ndim) if d not in dims]
        return self._view([self.shape[d] for d in keep], [self._strides[d] for d in keep])

    def unsqueeze(self, dim: int) -> "Tensor":
        dim = layout.normalize_dim(dim, self.ndim + 1)
        shape, strides = list(self.shape), list(self._strides)
        inner = self._strides[dim] * self.shape[dim] if dim < self.ndim else 1
        shape.insert(dim, 1)
        strides.insert(dim, inner)
        return self._view(shape, strides)

    def narrow(self, dim: int, start: int, length: int) -> "Tensor":
        n = len(self.shape)
        dim = dim if type(dim) is int and 0 <= dim < n else layout.normalize_dim(dim, n)
        size = self.shape[dim]
        start = start + size if start < 0 else start
        if not (0 <= start <= size and 0 <= length <= size - start):
            raise IndexingError(f"narrow(dim={dim}, start={start}, length={length}) is outside size {size}")
        shape = list(self.shape)
        shape[dim] = length if type(length) is int else layout.as_shape((length,))[0]   # a float refused by name
        return Tensor._of(self._storage, self.dtype, tuple(shape), self._strides,   # checked above
                          self._offset + int(start) * self._strides[dim])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "Tensor":
        if self.ndim == 0:
            return self.reshape(1)
        a, b = layout.normalize_dim(start_dim, self.ndim), layout.normalize_dim(end_dim, self.ndim)
        if a > b:
            raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        return self.reshape(*self.shape[:a], prod(self.shape[a:b + 1]), *self.shape[b + 1:])

    def unflatten(self, dim: int, sizes) -> "Tensor":
        dim = layout.normalize_dim(dim, self.ndim)
        sizes = layout.infer_shape(sizes, self.shape[dim])
        return self.view(*self.shape[:dim], *sizes, *self.shape[dim + 1:])

    def split(self, split_size_or_sections, dim: int = 0) -> tuple["Tensor", ...]:
        dim = layout.normalize_dim(dim, self.ndim)
        size = self.shape[dim]
        if isinstance(split_size_or_sections, int):
            step = split_size_or_sections
            if step <= 0:
                raise ShapeError(f"split size must be positive, got {step}")
            sizes = [min(step, size - s) for s in range(0, size, step)] or [0]
        else:
            sizes = list(split_size_or_sections)
            if sum(sizes) != size:
                raise ShapeError(f"split sizes {sizes} do not add up to dim {dim}'s size {size}")
        out, start = [], 0
        for s in sizes:
            out.append(self.narrow(dim, start, s))
            start += s
        return tuple(out)

    def chunk(self, chunks: int, dim: int = 0) -> tuple["Tensor", ...]:
        if chunks <= 0:
            raise ShapeError(f"chunk count must be positive, got {chunks}")
        size = self.shape[layout.normalize_dim(dim, self.ndim)]
        return self.split(max(-(-size // chunks), 1), dim)

    def unbind(self, dim: int = 0) -> tuple["Tensor", ...]:
        dim = layout.normalize_dim(dim, self.ndim)
        return tuple(self.select(dim, i) for i in range(self.shape[dim]))

    def select(self, dim: int, index: int) -> "Tensor":
        dim = layout.normalize_dim(dim, self.ndim)
        size = self.shape[dim]
        if not -size <= index < size:
            raise IndexingError(f"index {index} is out of bounds for dim {dim} of size {size}")
        index %= size
        keep = [d for d in range(self.ndim) if d != dim]
        return self._view([self.shape[d] for d in keep], [self._strides[d] for d in keep],
                          self._offset + index * self._strides[dim])

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> "Tensor":
        a, b = layout.normalize_dim(dim1, self.ndim), layout.normalize_dim(dim2, self.ndim)
        if a == b:
            raise ShapeError("diagonal needs two different dims")
        start = self._offset
        if offset >= 0:
            length = max(min(self.shape[a], self.shape[b] - offset), 0)
            start += offset * self._strides[b] if length else 0
        else:
            length = max(min(self.shape[a] + offset, self.shape[b]), 0)
            start += -offset * self._strides[a] if length else 0
        keep = [d for d in range(self.ndim) if d not in (a, b)]
        return self._view([self.shape[d] for d in keep] + [length],
                          [self._strides[d] for d in keep] + [self._strides[a] + self._strides[b]], start)

    def unfold(self, dimension: int, size: int, step: int) -> "Tensor":
        """torch's sliding windows along dimension, a view (ops/windows.py)."""
        from .ops.windows import sliding_windows
        return sliding_windows(self, dimension, size, step)

    def __getitem__(self, key) -> "Tensor":
        from .indexing import getitem
        return getitem(self, key)

    def __setitem__(self, key, value) -> None:
        from .indexing import setitem
        setitem(self, key, value)

    # ---- copies and host exchange ------------------------------------------------------------
    def _host_view(self) -> np.ndarray:
        """numpy's view of host-accessible storage, zero-copy, writable unless the storage is not."""
        host = self._storage.host
        if host is None:
            raise NotSupportedError(f"{self.device} memory is not host memory; use .numpy() to copy")
        item = self.dtype.itemsize
        if self.size == 0:
            return np.empty(self.shape, self.dtype.host)
        arr = np.ndarray(self.shape, self.dtype.host, buffer=host, offset=self._offset * item,
                         strides=[s * item for s in self._strides])
        if self._storage.readonly:
            arr.flags.writeable = False
        return arr

    def numpy(self) -> np.ndarray:
        """A numpy array: a view of host memory (cpu), else a copy brought to the host."""
        watching = work_observer()
        if watching is not None:  # inside a step being captured: a host read is refused on every device
            watching.host_access(self, "numpy()")
        deferred_checks.check(self.device)  # a bounds check a kernel left pending there is raised first
        if self._storage.host is not None:
            return self._host_view()
        lo, hi = layout.element_span(self.shape, self._strides, self._offset)
        item = self.dtype.itemsize
        raw = get_backend(self.device.type).download(self._storage, lo * item, (hi - lo) * item)
        flat = raw.view(self.dtype.host)
        if self.size == 0:
            return np.empty(self.shape, self.dtype.host)
        return np.ndarray(self.shape, self.dtype.host, buffer=flat, offset=(self._offset - lo) * item,
                          strides=[s * item for s in self._strides])

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        if copy:
            arr = arr.copy()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def contiguous(self) -> "Tensor":
        return self if self.is_contiguous() else self.clone()

    def clone(self) -> "Tensor":
        out = empty(self.shape, self.dtype, self.device)
        out._copy_from(self)
        return out

    def _copy_from(self, src: "Tensor") -> None:
        """Write src (same shape, any layout, any device of the same type) into self's layout."""
        from .dispatch import implementation
        if src.shape != self.shape:
            raise ShapeError(f"copy of shape {src.shape} into shape {self.shape}")
        implementation("copy_", self.device)(self, src)

    def to(self, *args, device=None, dtype=None, copy: bool = False) -> "Tensor":
        for arg in args:
            if isinstance(arg, (DType, type, np.dtype)) or (isinstance(arg, str) and _names_a_dtype(arg)):
                dtype = arg
            else:
                device = arg
        target = self.device if device is None else as_device(device)
        dtype = self.dtype if dtype is None else dtypes.as_dtype(dtype)
        out = self
        if target != self.device:
            out = transfer(self, target)
        if dtype is not out.dtype:
            from .ops.elementwise import astype
            out = astype(out, dtype)
        if copy and out is self:
            out = self.clone()
        return out

    def cpu(self) -> "Tensor":
        return self.to(CPU)

    def item(self):
        if self.size != 1:
            raise ShapeError(f"item() needs exactly one element, the tensor has {self.size}")
        value = self.numpy().reshape(()).item()
        if self.dtype.kind == "float" and not isinstance(value, float):
            value = float(value)  # ml_dtypes scalars (bfloat16, float8) come back as Python floats
        return value

    def tolist(self):
        arr = self.numpy()
        if self.dtype.kind == "float" and self.dtype.host.itemsize < 4:
            arr = arr.astype(np.float32)
        return arr.tolist()

    # ---- Python protocol ---------------------------------------------------------------------
    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self.select(0, i) for i in range(self.shape[0]))

    def _scalar(self, what: str):
        if self.size != 1:
            raise ShapeError(f"{what} of a tensor needs exactly one element, it has {self.size} (shape {self.shape})")
        return self.item()

    def __bool__(self) -> bool:
        return bool(self._scalar("bool()"))

    def __int__(self) -> int:
        if self.dtype.is_complex:
            raise TypeError("int() of a complex tensor")
        return int(self._scalar("int()"))

    def __float__(self) -> float:
        if self.dtype.is_complex:
            raise TypeError("float() of a complex tensor")
        return float(self._scalar("float()"))

    def __complex__(self) -> complex:
        return complex(self._scalar("complex()"))

    def __index__(self) -> int:
        if self.ndim != 0 or not self.dtype.is_integer:
            raise TypeError(f"only a 0-d integer tensor is an index, not a {self.ndim}-d {self.dtype.name} tensor")
        return int(self.item())

    def __repr__(self) -> str:
        prefix = "Tensor("
        values = self.numpy()
        if self.dtype.kind == "float" and values.dtype.type not in (np.float16, np.float32, np.float64):
            # numpy's printer takes ml_dtypes' bfloat16 and float8 for integers ("1, 2"): print their
            # values (exact in float32) in numpy's style for float32
            values = values.astype(np.float32)
        body = np.array2string(values, separator=", ", prefix=prefix, threshold=1000)
        extras = [f"shape={self.shape}"] if self.size == 0 and self.ndim != 1 else []
        if self.dtype not in (dtypes.DEFAULT_FLOAT, dtypes.DEFAULT_INT, dtypes.bool_) or self.size == 0:
            extras.append(f"dtype={self.dtype.name}")
        if self.device != CPU:
            extras.append(f"device='{self.device}'")
        return prefix + body + "".join(", " + e for e in extras) + ")"

    __hash__ = None  # tensors compare elementwise, so they are not hashable

    def __array_namespace__(self, *, api_version: str | None = None):
        from .namespace import namespace
        return namespace(api_version)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        from .dlpack import to_dlpack
        return to_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self):
        from .dlpack import dlpack_device
        return dlpack_device(self.device)

    def type_as(self, other: "Tensor") -> "Tensor":
        """self in other's dtype (torch's type_as; the device stays self's)."""
        return self.to(dtype=other.dtype)

    def copy(self) -> "Tensor":
        """A new tensor with self's values (numpy's spelling of clone)."""
        return self.clone()

    @property
    def __cuda_array_interface__(self):
        if self.device.type != "cuda":
            raise AttributeError("__cuda_array_interface__ exists for cuda tensors only")
        item = self.dtype.itemsize
        return {"shape": self.shape, "typestr": self.dtype.host.str, "data": (self.data_ptr(), False),
                "strides": tuple(s * item for s in self._strides), "version": 3}


# Casts by torch's names, each self.to(dtype): no copy when the tensor already has that dtype.
_CASTS = {"float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16",
          "int": "int32", "long": "int64", "bool": "bool"}


def _cast_method(name: str, dtype: DType):
    def cast(self) -> Tensor:
        return self.to(dtype=dtype)
    cast.__name__, cast.__qualname__ = name, f"Tensor.{name}"
    cast.__doc__ = f"self as {dtype.name} (torch's Tensor.{name}; no copy when it is {dtype.name} already)."
    return cast


for _name, _dtype in _CASTS.items():
    setattr(Tensor, _name, _cast_method(_name, dtypes.TABLE[_dtype]))


def _names_a_dtype(text: str) -> bool:
    try:
        dtypes.as_dtype(text)
    except UnknownDTypeError:
        return False
    return True


def empty(shape, dtype=None, device=None) -> Tensor:
    dt = dtype if type(dtype) is DType else dtypes.DEFAULT_FLOAT if dtype is None else dtypes.as_dtype(dtype)
    dev = as_device(device)
    shape = layout.as_shape(shape)
    strides = layout.dense_strides(shape)
    backend = _BACKENDS.get(dev.type) or get_backend(dev.type)  # get_backend's lookup, inline
    storage = backend.allocate(prod(shape) * dt.itemsize, dev)
    watching = _OBSERVER.current  # work_observer(), inline: every allocation asks
    if watching is not None:  # a step being captured plans its memory (nbx.core.graph_memory)
        watching.allocated(storage)
    return Tensor._of(storage, dt, shape, strides)  # its layout checked above


def from_numpy(arr: np.ndarray, device=None, copy: bool | None = None) -> Tensor:
    """A tensor over a numpy array: zero-copy on cpu when copy is not True, else a copy on device."""
    arr = np.asarray(arr)
    dt = dtypes.as_dtype(arr.dtype)
    dev = as_device(device)
    backend = get_backend(dev.type)
    zero_copy = (dev == CPU and copy is not True and arr.dtype == dt.host
                 and all(s % arr.itemsize == 0 for s in arr.strides))
    if zero_copy:
        return _wrap_host_array(arr, dt)
    if copy is False:
        raise ViewError(f"a numpy array cannot be viewed on {dev} without a copy (copy=False)")
    out = empty(arr.shape, dt, dev)
    watching = work_observer()
    if watching is not None and dev != CPU:
        watching.host_access(out, f"an upload from host memory to {dev}")
    backend.upload(out._storage, 0, as_c_contiguous(arr.astype(dt.host, copy=False)))
    return out


def _wrap_host_array(arr: np.ndarray, dt: DType) -> Tensor:
    item = arr.itemsize
    strides = tuple(s // item for s in arr.strides)
    if arr.size == 0:
        return Tensor(_empty_host_storage(), dt, arr.shape)
    lo, hi = layout.element_span(arr.shape, strides, 0)
    base = host_bytes(arr.ctypes.data + lo * item, (hi - lo) * item, arr, readonly=not arr.flags.writeable)
    storage = Storage(CPU, base.nbytes, base.ctypes.data, host=base, owner=arr,
                      readonly=not arr.flags.writeable)
    return Tensor(storage, dt, arr.shape, strides, -lo)


def _empty_host_storage() -> Storage:
    return Storage.from_host(CPU, np.empty(0, np.uint8))


def transfer(src: Tensor, target: Device) -> Tensor:
    """Copy a tensor to another device, keeping its values (the result is contiguous)."""
    deferred_checks.check(src.device)
    if get_backend(src.device.type).host_accessible:
        return from_numpy(as_c_contiguous(src._host_view()), target, copy=True)
    if src.device.type == target.type:  # cuda:0 -> cuda:1: the backend's copy_ (a peer copy), no host trip
        out = empty(src.shape, src.dtype, target)
        out._copy_from(src)
        return out
    host = from_numpy(as_c_contiguous(src.numpy()), CPU)
    return host if target == CPU else from_numpy(host._host_view(), target, copy=True)
