/*
 * tests.h -- the one list of C tests.  Add a test here and define it with
 * TEST(name) in a tests/c/test-*.c file.  Threaded tests are named thread_*
 * (the sanitizer target runs `test_spillway thread` under ThreadSanitizer).
 */
#ifndef SW_TESTS_H
#define SW_TESTS_H

#define SW_TEST_LIST(X)                                                       \
    /* test-backend.c */                                                      \
    X(backend_copy_queue_overlap)                                             \
    X(backend_queue_idle)                                                     \
    X(backend_event_elapsed)                                                  \
    X(backend_wait_chain)                                                     \
    X(thread_backend_copy_queues)                                             \
    /* test-handle.c */                                                      \
    X(handle_freed_slot_waits_its_turn)                                       \
    X(thread_handle_batches_go_back_at_exit)                                  \
    X(thread_buffer_ids_unique)                                               \
    /* test-disk.c */                                                         \
    X(disk_spills_past_the_host_budget)                                       \
    X(disk_read_takes_a_pool_block)                                           \
    X(disk_io_engine)                                                         \
    X(thread_dio_engine)                                                      \
    X(disk_budget_lowered_under_spilled_data)                                 \
    X(disk_faults_at_every_n)                                                 \
    X(disk_directory_missing_or_removed)                                      \
    X(disk_full_tiers_run_the_pressure_callbacks)                             \
    X(disk_full)                                                              \
    X(thread_disk_tier)                                                       \
    X(disk_prefetch_in_background)                                            \
    /* test-diskcopy.c */                                                     \
    X(diskcopy_read_back_moves_once)                                          \
    X(diskcopy_written_copy_goes_again)                                       \
    X(diskcopy_clean_write_fails)                                             \
    /* test-clearnew.c */                                                     \
    X(clearnew_reused_block_reads_zeros)                                      \
    X(clearnew_another_queue_sees_zeros)                                      \
    X(clearnew_bad_input)                                                     \
    X(thread_clearnew)                                                        \
    /* test-clean.c */                                                        \
    X(clean_evicted_twice_moves_once)                                         \
    X(clean_every_write_dirties)                                              \
    X(clean_first_among_equally_old)                                          \
    X(clean_cold_copy_goes_first)                                             \
    X(advise_cold_goes_first)                                                 \
    X(clean_bad_access_modes)                                                 \
    X(clean_copies_given_up)                                                  \
    X(thread_clean_copies)                                                    \
    /* test-inflight.c */                                                     \
    X(inflight_read_write)                                                    \
    X(inflight_reset_counters)                                                          \
    X(inflight_free)                                                          \
    X(inflight_free_after_prefetch_then_release_pool)                         \
    X(inflight_relaunch_and_spill_again)                                      \
    X(inflight_prefetch)                                                      \
    X(inflight_prefetch_next_use_waits)                                       \
    X(inflight_copy_fault_keeps_buffer)                                       \
    X(inflight_prefetch_queue_wait_fails)                                     \
    X(host_pool_bound)                                                        \
    X(thread_inflight)                                                        \
    X(thread_spill_of_restoring_buffer)                                       \
    /* test-contract.c */                                                \
    X(contract_budget_refusal_keeps_the_cache)                             \
    X(contract_set_that_cannot_come_back_moves_nothing)                    \
    X(contract_sum_refused_before_its_temporary)                           \
    X(contract_failed_op_leaves_its_operands)                              \
    X(contract_failed_prefetch_keeps_nothing)                              \
    X(contract_used_restore_is_kept)                                       \
    X(contract_pressure_last_chance)                                       \
    X(contract_release_host_pool_after_prefetch)                           \
    X(contract_pending_task_event_released_twice)                          \
    X(contract_restore_keeps_later_operands)                               \
    X(contract_failed_sum_keeps_its_operand)                               \
    X(contract_too_large_counts_as_oom)                                    \
    X(thread_contract_held_restores)                                       \
    /* test-refused.c */                                                      \
    X(refused_set_too_large_moves_nothing)                                    \
    X(refused_set_that_cannot_come_back_moves_nothing)                        \
    X(refused_result_beside_its_operands)                                     \
    /* test-pinorder.c */                                                     \
    X(pinorder_pin_waits_for_other_queues)                                    \
    X(thread_pinorder_queues_write_in_order)                                  \
    X(pinorder_waits_for_a_queue_still_pinning)                               \
    X(pinorder_host_pin_waits_for_every_queue)                                \
    X(pinorder_queues_sharing_an_id)                                          \
    /* test-native.c */                                                       \
    X(native_pin_on_queue_orders_later_spill)                                 \
    X(native_pin_on_queue_orders_reuse)                                       \
    X(native_pin_reads_inside_wait_for_the_queue)                             \
    X(native_pin_host_waits_for_queued_work)                                  \
    X(native_pin_restores)                                                    \
    X(native_pin_nested_and_duplicates)                                       \
    X(native_pins_never_move)                                                 \
    X(native_pin_bad_input)                                                   \
    X(native_pin_set_too_large)                                               \
    X(native_own_handles_refused)                                             \
    X(native_foreign_handles_refused)                                         \
    X(native_own_stream_gives_its_queue)                                      \
    X(native_handles_bad_input)                                               \
    X(native_opencl_adopts_a_command_queue)                                   \
    X(native_cuda_adopts_a_stream)                                            \
    X(native_hip_adopts_a_stream)                                             \
    X(thread_native_pins)                                                     \
    /* test-trypin.c */                                                       \
    X(trypin_warm_matches_full_form)                                          \
    X(trypin_leaves_the_rest_to_the_full_form)                                \
    X(trypin_never_waits_for_the_lock)                                        \
    X(thread_trypins)                                                         \
    /* test-register.c */                                                     \
    X(register_backend_opens_and_spills)                                      \
    X(register_backend_pressure_and_capacity)                                 \
    X(register_bad_tables)                                                    \
    X(register_wrap_of_own_queue_refused)                                     \
    X(register_table_full)                                                    \
    X(register_load_bad_paths)                                                \
    /* test-trace.c */                                                        \
    X(trace_every_kind_replays)                                               \
    X(trace_device_times)                                                     \
    X(trace_ring_bound)                                                       \
    X(thread_trace_dump_while_allocating)                                     \
    X(trace_callback_and_bad_input)                                           \
    X(stats_export_file)                                                      \
    /* test-hostoom.c */                                                      \
    X(hostoom_every_path)                                                     \
    X(hostoom_persistent)                                                     \
    X(hostoom_order_records)                                                  \
    X(hostoom_spill_keeps_victims_out_of_reach)                               \
    X(hostoom_allocation_stays_spillable)                                     \
    X(hostoom_empty_buffer_free_is_not_parked)                                \
    /* test-errors.c */                                                       \
    X(error_names)                                                            \
    X(error_last_error_per_thread)                                            \
    X(null_destroy_noop)                                                      \
    X(null_arguments)                                                         \
    X(null_argument_clears_outparams)                                         \
    X(foreign_handles)                                                        \
    X(stale_buffer_handles)                                                   \
    X(stale_event_handles)                                                    \
    X(stale_queue_scope_lease_handles)                                        \
    X(handles_of_another_type)                                                \
    X(dtype_size)                                                             \
    X(dtype_table)                                                            \
    X(parse_size)                                                             \
    X(format_bytes)                                                           \
    /* test-device.c */                                                       \
    X(device_count_and_specs)                                                 \
    X(device_open_refcount)                                                   \
    X(device_reopen_forgets_the_last_opening)                                 \
    X(device_open_default)                                                    \
    X(device_open_default_env)                                                \
    X(device_bad_specs)                                                       \
    X(device_close_busy)                                                      \
    X(device_closed_handle)                                                   \
    X(device_name_description)                                                \
    X(sim_memory_env)                                                         \
    X(sim_memory_env_malformed)                                               \
    X(sim_devices_env)                                                        \
    X(sim_devices_env_malformed)                                              \
    X(sim_devices_separate_accounting)                                        \
    X(backend_info)                                                           \
    /* test-accounting.c */                                                   \
    X(accounting_initial)                                                     \
    X(accounting_rounding)                                                    \
    X(accounting_views)                                                       \
    X(accounting_base_freed_view_alive)                                       \
    X(accounting_cache_reuse)                                                 \
    X(accounting_empty_cache)                                                 \
    X(accounting_device_free)                                                 \
    X(accounting_counters)                                                    \
    X(peak_and_reset)                                                         \
    X(peak_scopes_nested)                                                     \
    X(peak_scopes_out_of_order)                                               \
    X(peak_scope_peek)                                                        \
    X(peak_scope_bad_args)                                                    \
    /* test-budget.c */                                                       \
    X(budget_get_set)                                                         \
    X(budget_trims_cache)                                                     \
    X(budget_trims_oldest_first)                                              \
    X(budget_oom_message)                                                     \
    X(budget_below_one_alloc)                                                 \
    X(budget_below_held)                                                      \
    X(budget_below_held_spills_at_once)                                       \
    X(peak_reserved_and_counters)                                             \
    X(oom_report_says_why_not_moved)                                          \
    X(memory_snapshot)                                                        \
    X(budget_zero_is_none)                                                    \
    /* test-oom.c */                                                          \
    X(oom_fill_device)                                                        \
    X(oom_ladder_empties_cache)                                               \
    X(oom_fragmentation)                                                      \
    X(alloc_too_large)                                                        \
    X(oom_not_too_large)                                                      \
    /* test-buffer.c */                                                       \
    X(buffer_read_write)                                                      \
    X(buffer_zero_size)                                                       \
    X(buffer_out_of_range)                                                    \
    X(buffer_offset_overflow)                                                 \
    X(buffer_double_free)                                                     \
    X(buffer_use_after_free)                                                  \
    X(buffer_retain)                                                          \
    X(buffer_views)                                                           \
    X(buffer_view_out_of_range)                                               \
    X(buffer_tag)                                                             \
    X(buffer_state_and_device)                                                \
    X(buffer_device_ptr)                                                      \
    X(buffer_copy)                                                            \
    X(buffer_fill)                                                            \
    /* test-ops.c */                                                          \
    X(launch_begin_rechecks_repeated_handles)                                 \
    X(launch_end_rechecks)                                                    \
    X(ops_bool_arithmetic_refused)                                            \
    X(ops_dtype_support_mask)                                                 \
    X(ops_fill)                                                               \
    X(ops_add)                                                                \
    X(ops_scale)                                                              \
    X(ops_axpy)                                                               \
    X(ops_sum)                                                                \
    X(ops_buffer_fill_copy_dtypes)                                            \
    X(ops_integer_wrap)                                                       \
    X(ops_on_views)                                                           \
    X(ops_zero_elements)                                                      \
    X(ops_bad_dtype)                                                          \
    X(ops_too_small)                                                          \
    X(ops_in_place)                                                           \
    X(ops_mixed_devices)                                                      \
    X(launch_raw_kernels)                                                     \
    X(launch_bad_args)                                                        \
    /* test-dtypes.c */                                                       \
    X(dtypes_mask)                                                            \
    X(dtypes_fill)                                                            \
    X(dtypes_copy)                                                            \
    X(dtypes_add)                                                             \
    X(dtypes_scale)                                                           \
    X(dtypes_axpy)                                                            \
    X(dtypes_sum)                                                             \
    X(dtypes_sum_edges)                                                       \
    X(dtypes_sum_order)                                                       \
    X(dtypes_half_fill_rounding)                                              \
    X(dtypes_half_exhaustive)                                                 \
    X(dtypes_bool)                                                            \
    X(dtypes_unaligned)                                                       \
    X(dtypes_zero_elements)                                                   \
    X(dtypes_opencl_no_fp64)                                                  \
    /* test-async.c */                                                        \
    X(async_free_while_queued)                                                \
    X(async_empty_cache_while_queued)                                         \
    X(async_close_with_queued_work)                                           \
    X(async_cache_reuse_in_order)                                             \
    X(async_read_waits_for_ops)                                               \
    X(sim_validator_catches_stale_pointer)                                    \
    X(sim_validator_catches_out_of_bounds)                                    \
    /* test-fault.c */                                                        \
    X(fault_bad_args)                                                         \
    X(fault_alloc_countdown)                                                  \
    X(fault_copy_countdown)                                                   \
    X(fault_alloc_persistent)                                                 \
    X(fault_copy_persistent)                                                  \
    X(fault_cache_hit_skips_backend)                                          \
    /* test-threads.c */                                                      \
    X(thread_alloc_free_rw)                                                   \
    X(thread_ops)                                                             \
    X(thread_budget)                                                          \
    X(thread_peak_scopes)                                                     \
    X(thread_open_close)                                                      \
    X(thread_shared_buffer_refs)                                              \
    /* test-spill.c */                                                        \
    X(spill_seconds_within_wall_time)                                         \
    X(spill_lru_order)                                                        \
    X(launch_foreign_arg_moves_nothing)                                       \
    X(launch_foreign_arg_under_budget)                                        \
    X(thread_queue_destroy_vs_memory_info)                                    \
    X(spill_host_access_stays_spilled)                                        \
    X(spill_views_see_base)                                                   \
    X(spill_pinned_never_moves)                                               \
    X(spill_launch_restores_all)                                              \
    X(spill_launch_too_large)                                                 \
    X(spill_launch_too_large_for_device)                                      \
    X(spill_lease_and_external)                                               \
    X(spill_lease_outlives_handle)                                            \
    X(spill_budget_lowered)                                                   \
    X(spill_budget_below_one_alloc)                                           \
    X(spill_full_device)                                                      \
    X(spill_fault_copy_out)                                                   \
    X(spill_fault_restore)                                                    \
    X(spill_fault_nth)                                                        \
    X(pressure_callback_frees)                                                \
    X(thread_spill_model)                                                     \
    /* test-lockorder.c (the GIL contract; threaded: run under TSan) */       \
    X(thread_lockorder_python_threads)                                        \
    X(thread_lockorder_callback)                                              \
    X(thread_lockorder_c_thread)                                              \
    X(thread_lockorder_try_pins)                                              \
    X(thread_lockorder_reversal_reported)                                     \
    /* test-queue.c */                                                        \
    X(queue_basics)                                                           \
    X(queue_close_busy)                                                       \
    X(queue_ops_ordered_for_host)                                             \
    X(queue_small_work_waits_for_big)                                         \
    X(queue_free_while_queued)                                                \
    X(queue_spill_waits_for_queue)                                            \
    X(queue_spill_later_victim_waits_for_queue)                               \
    X(spill_copy_waits_only_for_its_buffer)                                   \
    X(spill_after_reopen_waits_for_queued_work)                               \
    X(copy_seconds_within_wall_time)                                          \
    X(copy_seconds_exclude_the_wait)                                          \
    X(queue_host_task)                                                        \
    X(queue_released_inside_host_task)                                        \
    X(queue_makes_room)                                                       \
    X(queue_churn_bounded)                                                    \
    X(order_record)                                                           \
    X(thread_queues)                                                          \
    /* test-opencl.c */                                                       \
    X(opencl_device_listed)                                                   \
    X(opencl_memory_env)                                                      \
    X(opencl_capacity_enforced)                                               \
    X(opencl_max_alloc)                                                       \
    X(opencl_budget_same_bits)                                                \
    X(opencl_sum_shapes)                                                      \
    X(opencl_fp64_off)                                                        \
    X(opencl_unaligned_kernels)                                               \
    X(opencl_error_names)                                                     \
    X(opencl_no_platform)                                                     \
    /* test-cuda-nvrtc.c */                                                   \
    X(cuda_kernel_source)                                                     \
    X(cuda_nvrtc_ptx)                                                         \
    X(cuda_nvrtc_cubin)                                                       \
    X(cuda_nvrtc_errors)                                                      \
    X(cuda_nvrtc_missing)                                                     \
    X(cuda_nvcc_ptx)                                                          \
    X(cuda_fake_nvrtc_images)                                                 \
    X(cuda_fake_nvrtc_errors)                                                 \
    X(cuda_pick_arch)                                                         \
    /* test-cuda.c */                                                         \
    X(cuda_signatures)                                                        \
    X(cuda_library_missing)                                                   \
    X(cuda_no_driver)                                                         \
    X(cuda_stub_driver)                                                       \
    X(cuda_error_mapping)                                                     \
    X(cuda_fake_driver)                                                       \
    X(cuda_fake_driver_ptx)                                                   \
    X(cuda_fake_driver_no_pools)                                              \
    X(cuda_fake_driver_oom)                                                   \
    X(cuda_fake_async_copy_queue)                                             \
    X(cuda_fake_pageable_staging)                                             \
    X(cuda_fake_no_nvrtc_fills)                                               \
    X(cuda_fake_sticky_error)                                                 \
    X(cuda_fake_fork_child)                                                   \
    X(cuda_fake_foreign_stream)                                               \
    X(cuda_gpu_device)                                                        \
    X(cuda_gpu_pool_returns_memory)                                           \
    X(cuda_gpu_fallback_allocator)                                            \
    X(cuda_gpu_unusual_paths)                                                 \
    X(cuda_gpu_fork_child)                                                    \
    /* test-hip.c */                                                          \
    X(hip_kernel_names)                                                       \
    X(hip_library_missing)                                                    \
    X(hip_library_wrong)                                                      \
    X(hip_no_gpu)                                                             \
    X(hip_error_mapping)                                                      \
    X(hip_signatures)                                                         \
    X(hip_hiprtc_code_object)                                                 \
    X(hip_hiprtc_errors)                                                      \
    X(hip_hiprtc_missing)                                                     \
    X(hip_fake_runtime)                                                       \
    X(hip_fake_runtime_no_pools)                                              \
    X(hip_fake_runtime_pool_off)                                              \
    X(hip_fake_runtime_oom)                                                   \
    X(hip_fake_unusual_paths)                                                 \
    X(hip_standin_checks)                                                     \
    X(hip_gpu_device)                                                         \
    /* test-ze.c */                                                           \
    X(ze_spirv_modules)                                                       \
    X(ze_library_missing)                                                     \
    X(ze_library_wrong)                                                       \
    X(ze_no_gpu)                                                              \
    X(ze_no_driver)                                                           \
    X(ze_error_mapping)                                                       \
    X(ze_signatures)                                                          \
    X(ze_fake_loader)                                                         \
    X(ze_fake_no_fp64)                                                        \
    X(ze_fake_no_sysman)                                                      \
    X(ze_fake_legacy_sysman)                                                  \
    X(ze_fake_no_kernels)                                                     \
    X(ze_fake_oom)                                                            \
    X(ze_fake_unusual_paths)                                                  \
    X(ze_standin_checks)                                                      \
    X(ze_gpu_device)                                                          \
    /* test-host.c */                                                         \
    X(host_device_listed)                                                     \
    X(host_memory_figures)                                                    \
    X(host_memory_env)                                                        \
    X(host_memory_env_malformed)                                              \
    X(host_budget_is_oom_not_spill)                                           \
    X(host_capacity_is_oom_not_spill)                                         \
    X(host_kernels_on_the_cpu)                                                \
    X(thread_host_queues_and_events)

#define SW__DECLARE_TEST(name) void test_##name(void);
SW_TEST_LIST(SW__DECLARE_TEST)
#undef SW__DECLARE_TEST

#endif /* SW_TESTS_H */
