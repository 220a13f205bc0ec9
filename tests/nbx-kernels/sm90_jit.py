"""A child process's prelude (read as text by the sm_90 lowering tests, run with `python -c`): a kernel
launch compiled for sm_90 as Triton's JIT would specialize it, through the stages asked, no GPU."""
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import create_function_from_signature
from triton._C.libtriton import ir


class Pointer:   # what Triton reads of a pointer argument: a 16-byte aligned data_ptr() and str(dtype)
    def __init__(self, dtype):
        self.dtype = dtype

    def data_ptr(self):
        return 1 << 20


target = GPUTarget("cuda", 90, 32)
backend = make_backend(target)


def jit_stages(kernel, args, meta, last):
    """(the module after stage `last` of ttir, ttgir, llir, ptx; the compile's metadata) of kernel(*args, **meta):
    the JIT's own specialization of the arguments (an int of 1 becomes a constexpr, multiples of 16 are marked)."""
    bound, specialization, options = create_function_from_signature(kernel.signature, kernel.params, backend)(*args, **meta)
    options, signature, constexprs, attrs = kernel._pack_args(backend, meta, bound, specialization, options)
    source = ASTSource(kernel, signature, constexprs, attrs)
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    stages, metadata = {}, {}
    backend.add_stages(stages, options, source.language)
    module = source.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                            context)
    order = ("ttir", "ttgir", "llir", "ptx")
    for stage in order[:order.index(last) + 1]:
        module = stages[stage](module, metadata)
    return module, metadata
