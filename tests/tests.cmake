# The CUDA backend emulated on the CPU: ted_emu and the emulated op tests (tests/cuda_emu).
include(${CMAKE_SOURCE_DIR}/tests/cuda_emu/cuda_emu.cmake)
# Every tests/test_*.c is a C test program; every tests/test_*.sh a script test that gets
# TED (the binary), TED_ROOT (the source tree), PYTHON (Debian's python3 with torch) and
# TED_TMP (a scratch directory) in its environment. Script tests that need MPI are
# named test_mpi_*.sh and run under mpiexec from inside the script.
# tests/test_cuda_*.c check the CUDA backend against the CPU ops: built with the backend only,
# and on a machine without a GPU they exit 77, which CTest reports as skipped (not passed).
file(GLOB TED_C_TESTS ${CMAKE_SOURCE_DIR}/tests/test_*.c)
file(GLOB TED_CUDA_TESTS ${CMAKE_SOURCE_DIR}/tests/test_cuda_*.c)
if(NOT TED_WITH_CUDA AND TED_CUDA_TESTS)
  list(REMOVE_ITEM TED_C_TESTS ${TED_CUDA_TESTS})
endif()
foreach(src ${TED_C_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} tedcore)
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77)
endforeach()
# test_bf16_ops runs in emulated bf16 compute; test_bf16_ops_native runs the same checks on the CPU's
# bf16 instructions through oneDNN (exit 77, skipped, on a CPU without them)
add_test(NAME test_bf16_ops_native COMMAND test_bf16_ops --native WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(test_bf16_ops_native PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77)
file(GLOB TED_SH_TESTS ${CMAKE_SOURCE_DIR}/tests/test_*.sh)
foreach(src ${TED_SH_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_test(NAME ${name} COMMAND bash ${src} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES TIMEOUT 900 ENVIRONMENT
    "TED=$<TARGET_FILE:ted>;TED_ROOT=${CMAKE_SOURCE_DIR};PYTHON=/usr/bin/python3;TED_TMP=${CMAKE_BINARY_DIR}/testtmp/${name};OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77)
endforeach()
# test_bf16_compute.sh runs in emulated bf16 compute; test_bf16_compute_native on the CPU's bf16
# instructions (exit 77, skipped, without them)
add_test(NAME test_bf16_compute_native COMMAND bash ${CMAKE_SOURCE_DIR}/tests/test_bf16_compute.sh
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(test_bf16_compute_native PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 ENVIRONMENT
  "TED=$<TARGET_FILE:ted>;TED_ROOT=${CMAKE_SOURCE_DIR};PYTHON=/usr/bin/python3;TED_TMP=${CMAKE_BINARY_DIR}/testtmp/test_bf16_compute_native;OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE;TED_BF16_NATIVE=1")
# tests/test_cuda_emu.sh and test_zero_offload_emu.sh run the GPU path under the CPU emulation: it needs ted_emu (and exits
# 77 without it); test_upcycle.sh checks --init-from --device cuda under it where it is built
if(TARGET ted_emu)
  set_property(TEST test_cuda_emu test_zero_offload_emu test_upcycle APPEND PROPERTY ENVIRONMENT "TED_EMU=$<TARGET_FILE:ted_emu>")
endif()
# Programs the script tests run under mpirun (tests/progs/*.c): built beside ted.
file(GLOB TED_TEST_PROGS ${CMAKE_SOURCE_DIR}/tests/progs/*.c)
foreach(src ${TED_TEST_PROGS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} tedcore)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
endforeach()
# Labels: the rooms of src/ each test checks (`ctest -L moe` runs the tests of the MoE room),
# plus mpi (ranks under mpirun), gpu (the CUDA backend: on a GPU or under the emulation) and house
# (the tree's own rules). tests/README.md is this map in words. A test missing here is labelled
# "unmapped" (and said at configure time): give it its rooms.
set(TED_TEST_LABELS
  test_config=config
  test_deepspeed_keys=config,parallel
  test_startup=config,run
  test_resume_config=config,run,io
  test_mpi_train_batch=config,run,mpi
  test_bad_input=config,io,run,cli
  test_sanitize=config,io
  test_grad=nn,moe,model
  test_sparse_attention=nn
  test_gemm=nn
  test_fresh=nn
  test_bf16_ops=nn,moe,model
  test_bf16_ops_native=nn,moe,model
  test_bf16_compute=nn,model,mpi
  test_bf16_compute_native=nn,model,mpi
  test_sparse_model=nn,model
  test_sparse_cli=nn,config
  test_mpi_sparse=nn,parallel,mpi
  test_precision=nn,parallel,mpi
  test_schedule=parallel
  test_grad_zero=parallel
  test_mpi_grad_zero=parallel,mpi
  test_mpi_comm_async=parallel,mpi
  test_mpi_zero_stages=parallel,mpi
  test_mpi_overlap_comm=parallel,mpi
  test_mpi_onebit=parallel,mpi
  test_onebit_exact=parallel
  test_router=moe
  test_router_family=moe
  test_mpi_routing=moe,mpi
  test_mpi_counts=moe,parallel,mpi
  test_mpi_equivalence=moe,parallel,model,mpi
  test_mpi_optimizations=moe,parallel,mpi
  test_mpi_overlap=moe,parallel,mpi
  test_mfu=model
  test_mpi_pipeline=model,parallel,mpi
  test_mpi_llama=model,parallel,mpi
  test_vs_torch=model,run
  test_llama_vs_torch=model,run
  test_torch_ref_selfcheck=model
  test_safetensors=io
  test_tokenizer=io
  test_tokenize=io
  test_tokenize_docs=io
  test_hf_gpt2=io
  test_hf_layout=io
  test_hf_llama=io
  test_upcycle=io,cli
  test_resume=io,run
  test_mpi_resume_layouts=io,run,mpi
  test_mpi_init_from=io,run,mpi
  test_trust=io,run
  test_full_disk=io,run,mpi
  test_mpi_trust=io,run,mpi
  test_mpi_signals=run,io,mpi
  test_monitor=io,run
  test_progress=io,run,model
  test_plan=perf,cli
  test_tune=perf,cli
  test_tune_line=perf,cli,run
  test_frictions=cli,run,io
  test_cluster=perf,parallel,mpi
  test_mpi_failure=run,parallel,mpi
  test_generate=run,cli
  test_threads=run,cli
  test_cuda_kernels=cuda,gpu
  test_cuda_moe=cuda,moe,gpu
  test_cuda_emu=cuda,gpu,mpi
  test_cuda_emu_sparse=cuda,nn,gpu
  test_cuda_train=cuda,gpu,mpi
  test_zero_offload_emu=cuda,parallel,gpu
  test_cuda_fused=cuda,nn,gpu
  test_gpu_scripts=gpu,house
  test_layers=house
  test_portable=house,nn,parallel
  test_doc_refs=house
  test_doc_commands=house,cli,run)
foreach(entry ${TED_TEST_LABELS})
  string(REPLACE "=" ";" kv ${entry})
  list(GET kv 0 name)
  list(GET kv 1 rooms)
  string(REPLACE "," ";" rooms ${rooms})
  if(TEST ${name})
    set_tests_properties(${name} PROPERTIES LABELS "${rooms}")
  endif()
endforeach()
foreach(src ${TED_C_TESTS} ${TED_SH_TESTS})
  get_filename_component(name ${src} NAME_WE)
  get_test_property(${name} LABELS have)
  if(NOT have)
    set_tests_properties(${name} PROPERTIES LABELS unmapped)
    message(STATUS "tests: ${name} has no room in TED_TEST_LABELS (tests/tests.cmake): labelled unmapped")
  endif()
endforeach()
