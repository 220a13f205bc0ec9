"""The HIP constants nbx reads, and the device-properties layout it needs for one field.

Numeric facts come from hipDeviceGetAttribute, whose enum values are stable; only the architecture
name (gcnArchName) has no attribute, so it is read from hipDeviceProp_tR0600, the layout HIP has
frozen under that name since ROCm 6.0 (hip_runtime_api.h). The struct below spells that layout up
to gcnArchName; the buffer handed to HIP is larger than it, and the name read back must start
with 'gfx' or it is refused (a layout this code does not know).
"""
from __future__ import annotations

import ctypes

# hipDeviceAttribute_t (hip_runtime_api.h, ROCm 5.0 and later): the CUDA-compatible block counts
# from 0 in the header's order; AMD's own attributes start at 10000.
ATTRIBUTES = {
    "integrated": 16,
    "clock_rate_khz": 5,
    "l2_cache_bytes": 19,
    "compute_capability_major": 23,
    "max_threads_per_block": 56,
    "compute_capability_minor": 61,
    "multiprocessor_count": 63,
    "max_registers_per_block": 71,
    "max_shared_memory_per_block": 74,
    "warp_size": 87,
    "virtual_memory_management": 89,
    "max_shared_memory_per_multiprocessor": 10002,
}

MEMCPY_HOST_TO_DEVICE = 1
MEMCPY_DEVICE_TO_HOST = 2
MEMCPY_DEVICE_TO_DEVICE = 3

ERROR_OUT_OF_MEMORY = 2
ERROR_NO_DEVICE = 100

_int, _uint, _size = ctypes.c_int, ctypes.c_uint, ctypes.c_size_t


class DevicePropR0600(ctypes.Structure):
    """hipDeviceProp_tR0600 from its start through gcnArchName (the fields after it are not read)."""

    _fields_ = [
        ("name", ctypes.c_char * 256), ("uuid", ctypes.c_char * 16), ("luid", ctypes.c_char * 8),
        ("luidDeviceNodeMask", _uint), ("totalGlobalMem", _size), ("sharedMemPerBlock", _size),
        ("regsPerBlock", _int), ("warpSize", _int), ("memPitch", _size), ("maxThreadsPerBlock", _int),
        ("maxThreadsDim", _int * 3), ("maxGridSize", _int * 3), ("clockRate", _int), ("totalConstMem", _size),
        ("major", _int), ("minor", _int), ("textureAlignment", _size), ("texturePitchAlignment", _size),
        ("deviceOverlap", _int), ("multiProcessorCount", _int), ("kernelExecTimeoutEnabled", _int),
        ("integrated", _int), ("canMapHostMemory", _int), ("computeMode", _int), ("maxTexture1D", _int),
        ("maxTexture1DMipmap", _int), ("maxTexture1DLinear", _int), ("maxTexture2D", _int * 2),
        ("maxTexture2DMipmap", _int * 2), ("maxTexture2DLinear", _int * 3), ("maxTexture2DGather", _int * 2),
        ("maxTexture3D", _int * 3), ("maxTexture3DAlt", _int * 3), ("maxTextureCubemap", _int),
        ("maxTexture1DLayered", _int * 2), ("maxTexture2DLayered", _int * 3), ("maxTextureCubemapLayered", _int * 2),
        ("maxSurface1D", _int), ("maxSurface2D", _int * 2), ("maxSurface3D", _int * 3),
        ("maxSurface1DLayered", _int * 2), ("maxSurface2DLayered", _int * 3), ("maxSurfaceCubemap", _int),
        ("maxSurfaceCubemapLayered", _int * 2), ("surfaceAlignment", _size), ("concurrentKernels", _int),
        ("ECCEnabled", _int), ("pciBusID", _int), ("pciDeviceID", _int), ("pciDomainID", _int), ("tccDriver", _int),
        ("asyncEngineCount", _int), ("unifiedAddressing", _int), ("memoryClockRate", _int), ("memoryBusWidth", _int),
        ("l2CacheSize", _int), ("persistingL2CacheMaxSize", _int), ("maxThreadsPerMultiProcessor", _int),
        ("streamPrioritiesSupported", _int), ("globalL1CacheSupported", _int), ("localL1CacheSupported", _int),
        ("sharedMemPerMultiprocessor", _size), ("regsPerMultiprocessor", _int), ("managedMemory", _int),
        ("isMultiGpuBoard", _int), ("multiGpuBoardGroupID", _int), ("hostNativeAtomicSupported", _int),
        ("singleToDoublePrecisionPerfRatio", _int), ("pageableMemoryAccess", _int), ("concurrentManagedAccess", _int),
        ("computePreemptionSupported", _int), ("canUseHostPointerForRegisteredMem", _int), ("cooperativeLaunch", _int),
        ("cooperativeMultiDeviceLaunch", _int), ("sharedMemPerBlockOptin", _size),
        ("pageableMemoryAccessUsesHostPageTables", _int), ("directManagedMemAccessFromHost", _int),
        ("maxBlocksPerMultiProcessor", _int), ("accessPolicyMaxWindowSize", _int), ("reservedSharedMemPerBlock", _size),
        ("hostRegisterSupported", _int), ("sparseHipArraySupported", _int), ("hostRegisterReadOnlySupported", _int),
        ("timelineSemaphoreInteropSupported", _int), ("memoryPoolsSupported", _int), ("gpuDirectRDMASupported", _int),
        ("gpuDirectRDMAFlushWritesOptions", _uint), ("gpuDirectRDMAWritesOrdering", _int),
        ("memoryPoolSupportedHandleTypes", _uint), ("deferredMappingHipArraySupported", _int),
        ("ipcEventSupported", _int), ("clusterLaunch", _int), ("unifiedFunctionPointers", _int),
        ("reserved", _int * 63), ("hipReserved", _int * 32), ("gcnArchName", ctypes.c_char * 256),
    ]


# HIP writes the whole struct, which continues past gcnArchName: give it room to spare.
PROPS_BUFFER_BYTES = 4096
assert ctypes.sizeof(DevicePropR0600) < PROPS_BUFFER_BYTES
