// check_cuda_h.cpp: compile-time check of the values that cuda_api.h declares
// against cuda.h, built when the build finds cuda.h (MLXN_CHECK_CUDA_H). It is
// a translation unit of its own because cuda.h #defines many driver function
// names (cuMemAlloc -> cuMemAlloc_v2, ...), which would rename the members of
// mlxn_cuda::Driver elsewhere; here cuda_api.h comes first, so they are not.
#include "cuda_api.h"

#ifdef MLXN_CHECK_CUDA_H
#include <cuda.h>
#define MLXN_SAME(name) static_assert(static_cast<long long>(mlxn_cuda::name) == \
                                      static_cast<long long>(::name), #name)
MLXN_SAME(CUDA_SUCCESS);
MLXN_SAME(CUDA_ERROR_NO_DEVICE);
MLXN_SAME(CUDA_ERROR_NOT_READY);
MLXN_SAME(CUDA_ERROR_NOT_FOUND);
MLXN_SAME(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
MLXN_SAME(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
MLXN_SAME(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
MLXN_SAME(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
MLXN_SAME(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
MLXN_SAME(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
MLXN_SAME(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
MLXN_SAME(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
MLXN_SAME(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
MLXN_SAME(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
MLXN_SAME(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
MLXN_SAME(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
MLXN_SAME(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
MLXN_SAME(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
MLXN_SAME(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
MLXN_SAME(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
MLXN_SAME(CU_STREAM_NON_BLOCKING);
MLXN_SAME(CU_EVENT_DEFAULT);
MLXN_SAME(CU_EVENT_DISABLE_TIMING);
MLXN_SAME(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
MLXN_SAME(CU_JIT_INFO_LOG_BUFFER);
MLXN_SAME(CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES);
MLXN_SAME(CU_JIT_ERROR_LOG_BUFFER);
MLXN_SAME(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES);
static_assert(sizeof(mlxn_cuda::CUdeviceptr) == sizeof(::CUdeviceptr), "CUdeviceptr");
static_assert(sizeof(mlxn_cuda::CUdevice) == sizeof(::CUdevice), "CUdevice");
MLXN_SAME(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
static_assert(sizeof(mlxn_cuda::CUlaunchAttributeValue) == sizeof(::CUlaunchAttributeValue), "CUlaunchAttributeValue");
static_assert(sizeof(mlxn_cuda::CUlaunchAttribute) == sizeof(::CUlaunchAttribute), "CUlaunchAttribute");
static_assert(offsetof(mlxn_cuda::CUlaunchAttribute, value) == offsetof(::CUlaunchAttribute, value), "CUlaunchAttribute.value");
static_assert(sizeof(mlxn_cuda::CUlaunchConfig) == sizeof(::CUlaunchConfig), "CUlaunchConfig");
static_assert(offsetof(mlxn_cuda::CUlaunchConfig, sharedMemBytes) == offsetof(::CUlaunchConfig, sharedMemBytes), "CUlaunchConfig.sharedMemBytes");
static_assert(offsetof(mlxn_cuda::CUlaunchConfig, hStream) == offsetof(::CUlaunchConfig, hStream), "CUlaunchConfig.hStream");
static_assert(offsetof(mlxn_cuda::CUlaunchConfig, attrs) == offsetof(::CUlaunchConfig, attrs), "CUlaunchConfig.attrs");
static_assert(offsetof(mlxn_cuda::CUlaunchConfig, numAttrs) == offsetof(::CUlaunchConfig, numAttrs), "CUlaunchConfig.numAttrs");
static_assert(sizeof(mlxn_cuda::CUtensorMap) == sizeof(::CUtensorMap), "CUtensorMap");
static_assert(alignof(mlxn_cuda::CUtensorMap) <= alignof(::CUtensorMap), "CUtensorMap alignment");
MLXN_SAME(CU_TENSOR_MAP_DATA_TYPE_UINT8);
MLXN_SAME(CU_TENSOR_MAP_DATA_TYPE_UINT16);
MLXN_SAME(CU_TENSOR_MAP_DATA_TYPE_UINT32);
MLXN_SAME(CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
MLXN_SAME(CU_TENSOR_MAP_DATA_TYPE_FLOAT32);
MLXN_SAME(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
MLXN_SAME(CU_TENSOR_MAP_INTERLEAVE_NONE);
MLXN_SAME(CU_TENSOR_MAP_SWIZZLE_NONE);
MLXN_SAME(CU_TENSOR_MAP_SWIZZLE_32B);
MLXN_SAME(CU_TENSOR_MAP_SWIZZLE_64B);
MLXN_SAME(CU_TENSOR_MAP_SWIZZLE_128B);
MLXN_SAME(CU_TENSOR_MAP_L2_PROMOTION_NONE);
MLXN_SAME(CU_TENSOR_MAP_L2_PROMOTION_L2_64B);
MLXN_SAME(CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
MLXN_SAME(CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
MLXN_SAME(CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
#undef MLXN_SAME
#endif
