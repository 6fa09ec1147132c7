# Embeds every kernels/*.cl file into a generated C++ source at build time (no Python needed).
# Each .cl file becomes one program named after its stem, with the .clh headers it includes
# spliced in; kernel_source("name") returns its text.
function(specdec_embed_kernels out_var kernel_dir)
  file(GLOB kernel_files CONFIGURE_DEPENDS "${kernel_dir}/*.cl" "${kernel_dir}/*.clh")
  set(out "${CMAKE_CURRENT_BINARY_DIR}/generated/specdec_kernels.cpp")
  add_custom_command(
    OUTPUT "${out}"
    COMMAND "${CMAKE_COMMAND}" -DKERNEL_DIR=${kernel_dir} -DOUT=${out}
            -P "${CMAKE_CURRENT_SOURCE_DIR}/cmake/EmbedKernelsScript.cmake"
    DEPENDS ${kernel_files} "${CMAKE_CURRENT_SOURCE_DIR}/cmake/EmbedKernelsScript.cmake"
    COMMENT "Embedding OpenCL kernels")
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()
