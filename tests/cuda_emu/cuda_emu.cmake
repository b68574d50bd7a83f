# The CUDA backend on the CPU (tests/cuda_emu): the real src/*/*.c built with TED_CUDA, and the
# real src/cuda/*.cu turned into C++ by transform.py (at build time, so that they follow edits),
# linked with emu.cpp (CUDA runtime, cuBLAS, kernel execution; NCCL stops) into
#   ted_emu                   src/cli/main.c: `ted_emu train --device cuda` runs the GPU path
#   test_cuda_kernels_emu     tests/test_cuda_kernels.c
#   test_cuda_moe_emu         tests/test_cuda_moe.c
#   test_cuda_fused_emu       tests/test_cuda_fused.c
#   flash_bench_emu           bench/flash_bench.c (the program itself, on small shapes)
#   emu_probe                 tests/cuda_emu/emu_probe.cpp: what the emulated cuBLAS takes and refuses
# tests/test_cuda_emu.sh runs them. Needs a C++17 compiler, Python 3 and the CUDA headers
# (cuda_runtime.h, cublas_v2.h, nccl.h) — not a GPU, nvcc or the CUDA libraries.
include(CheckLanguage)
check_language(CXX)
find_package(Python3 COMPONENTS Interpreter QUIET)
find_path(TED_EMU_CUDA_INCLUDE cuda_runtime.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
find_path(TED_EMU_CUBLAS_INCLUDE cublas_v2.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
find_path(TED_EMU_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
if(NOT CMAKE_CXX_COMPILER OR NOT Python3_Interpreter_FOUND OR NOT TED_EMU_CUDA_INCLUDE OR NOT TED_EMU_CUBLAS_INCLUDE
   OR NOT TED_EMU_NCCL_INCLUDE)
  message(STATUS "CUDA emulation (ted_emu): OFF (needs a C++ compiler, Python 3 and the CUDA and NCCL headers)")
  return()
endif()
enable_language(CXX)
message(STATUS "CUDA emulation (ted_emu): ON (headers in ${TED_EMU_CUDA_INCLUDE})")

set(emu_dir ${CMAKE_SOURCE_DIR}/tests/cuda_emu)
set(emu_gen ${CMAKE_BINARY_DIR}/cuda_emu)
file(GLOB emu_cu ${CMAKE_SOURCE_DIR}/src/cuda/*.cu)
file(GLOB emu_h ${CMAKE_SOURCE_DIR}/src/cuda/*.h ${CMAKE_SOURCE_DIR}/src/cuda/*.cuh)
set(emu_out)
foreach(f ${emu_cu})
  get_filename_component(n ${f} NAME_WE)
  list(APPEND emu_out ${emu_gen}/${n}.cpp)
endforeach()
foreach(f ${emu_h})
  get_filename_component(n ${f} NAME)
  list(APPEND emu_out ${emu_gen}/${n})
endforeach()
add_custom_command(OUTPUT ${emu_out}
  COMMAND ${Python3_EXECUTABLE} ${emu_dir}/transform.py ${emu_gen} ${emu_cu} ${emu_h}
  DEPENDS ${emu_dir}/transform.py ${emu_cu} ${emu_h}
  COMMENT "transform.py: src/cuda/*.cu for the CPU emulation")

set(emu_c ${TED_SOURCES})   # every room's .c (CMakeLists.txt), without cli/main.c
add_library(tedcore_emu STATIC ${emu_c} ${emu_out} ${emu_dir}/emu.cpp ${emu_dir}/emu.h)
target_compile_definitions(tedcore_emu PUBLIC TED_CUDA)
# the generated .cpp find the generated cuda_ops.h beside them, then the rooms' headers through src/
target_include_directories(tedcore_emu PUBLIC ${CMAKE_SOURCE_DIR}/src ${CBLAS_INCLUDE} ${TED_EMU_CUDA_INCLUDE}
  ${TED_EMU_CUBLAS_INCLUDE} ${TED_EMU_NCCL_INCLUDE} PRIVATE ${emu_dir} ${CMAKE_SOURCE_DIR}/src/cuda)
set_source_files_properties(${emu_out} ${emu_dir}/emu.cpp PROPERTIES COMPILE_OPTIONS
  "-std=c++17;-O2;-Wall;-Wno-unused-function;-Wno-deprecated-declarations;-Wno-unknown-pragmas")
target_link_libraries(tedcore_emu PUBLIC OpenMP::OpenMP_C MPI::MPI_C PkgConfig::PCRE2 PkgConfig::CJSON
  ${OPENBLAS_LIB} m)

add_executable(ted_emu ${CMAKE_SOURCE_DIR}/src/cli/main.c)
add_executable(test_cuda_kernels_emu ${CMAKE_SOURCE_DIR}/tests/test_cuda_kernels.c)
add_executable(test_cuda_moe_emu ${CMAKE_SOURCE_DIR}/tests/test_cuda_moe.c)
add_executable(test_cuda_fused_emu ${CMAKE_SOURCE_DIR}/tests/test_cuda_fused.c)
add_executable(flash_bench_emu ${CMAKE_SOURCE_DIR}/bench/flash_bench.c)
add_executable(emu_probe ${emu_dir}/emu_probe.cpp)   # what the emulated cuBLAS takes and refuses
set_source_files_properties(${emu_dir}/emu_probe.cpp PROPERTIES COMPILE_OPTIONS "-std=c++17;-Wall;-Wno-deprecated-declarations")
foreach(t ted_emu test_cuda_kernels_emu test_cuda_moe_emu test_cuda_fused_emu flash_bench_emu emu_probe)
  target_link_libraries(${t} tedcore_emu)
  # exported symbols: the emulation's backtraces name the functions
  set_target_properties(${t} PROPERTIES LINKER_LANGUAGE CXX ENABLE_EXPORTS ON)
endforeach()
