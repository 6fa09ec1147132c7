# The device seam's layering rule (docs/device_seam.md, "A layering check"; /work/shared/DESIGN.md
# section 2): no `#include "ocl/...`, no `#include "device/ocl_device.h"` and no OpenCL `cl_` name
# outside the OpenCL device's own files.
# Run: cmake -DSOURCE_DIR=<repo> -P cmake/layering_check.cmake (CTest `layering`).
# ALLOWED: today's files that still name OpenCL. Each step of the plan shrinks it; step 8 empties
# it. A file that no longer needs its entry fails the check too, so the list only shrinks.
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "layering_check: pass -DSOURCE_DIR=<repository root>")
endif()

set(ALLOWED
  bindings/register_common.cpp
  tests/cpp/attention_test_util.h
  tests/cpp/quant_test_util.h
)

# The OpenCL device's own files: always allowed.
set(OCL_FILES_REGEX "^(cpp/ocl/|cpp/device/(ocl_device\\.|open\\.cpp$)|bindings/register_ocl\\.cpp$|tests/cpp/(ocl|device)_test\\.cpp$|.*/ocl_[^/]*\\.(h|cpp)$)")
set(NAMES_OPENCL_REGEX "#include \"(ocl/|device/ocl_device\\.h)|(^|[^A-Za-z0-9_])cl_[a-z_]+")

file(GLOB_RECURSE files RELATIVE "${SOURCE_DIR}"
     "${SOURCE_DIR}/cpp/*.h" "${SOURCE_DIR}/cpp/*.cpp"
     "${SOURCE_DIR}/bindings/*.h" "${SOURCE_DIR}/bindings/*.cpp"
     "${SOURCE_DIR}/tests/cpp/*.h" "${SOURCE_DIR}/tests/cpp/*.cpp")
set(errors "")
foreach(f IN LISTS files)
  if(f MATCHES "${OCL_FILES_REGEX}")
    continue()
  endif()
  file(READ "${SOURCE_DIR}/${f}" text)
  string(REGEX MATCH "${NAMES_OPENCL_REGEX}" hit "${text}")
  list(FIND ALLOWED "${f}" allowed)
  if(hit AND allowed EQUAL -1)
    string(APPEND errors "  ${f}: names OpenCL ('${hit}') above the device seam; use device/ (device.h, buffer.h)\n")
  elseif(NOT hit AND NOT allowed EQUAL -1)
    string(APPEND errors "  ${f}: no longer names OpenCL; remove it from ALLOWED in cmake/layering_check.cmake\n")
  endif()
endforeach()
foreach(f IN LISTS ALLOWED)
  if(NOT EXISTS "${SOURCE_DIR}/${f}")
    string(APPEND errors "  ${f}: in ALLOWED but gone; remove it from cmake/layering_check.cmake\n")
  endif()
endforeach()
if(errors)
  message(FATAL_ERROR "layering check failed:\n${errors}")
endif()
list(LENGTH ALLOWED n)
message(STATUS "layering check: ok (${n} files still allowed to name OpenCL)")
