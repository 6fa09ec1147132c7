# CMake generated Testfile for 
# Source directory: /work/main/tests/cpp
# Build directory: /work/main/build-blocks/tests/cpp
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
include("/work/main/build-blocks/tests/cpp/blocks_test[1]_include.cmake")
include("/work/main/build-blocks/tests/cpp/dtype_test[1]_include.cmake")
include("/work/main/build-blocks/tests/cpp/kv_alloc_test[1]_include.cmake")
include("/work/main/build-blocks/tests/cpp/kv_layout_test[1]_include.cmake")
include("/work/main/build-blocks/tests/cpp/kv_planner_test[1]_include.cmake")
include("/work/main/build-blocks/tests/cpp/kv_spec_test[1]_include.cmake")
include("/work/main/build-blocks/tests/cpp/ocl_test[1]_include.cmake")
