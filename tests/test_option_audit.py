"""No option is accepted and ignored.

Every option of the consumer table, of the lite pull consumer's own table and
of the producer is either marked ``compat_only`` (accepted so Java settings carry
over, with the reason it does nothing) or named in :data:`EFFECT_TESTS` with
the tests that show its effect. Each named test must exist and give the option
a value other than its default in its own body (read by ``option_audit``), so
a registry entry cannot point at a test that merely passes the default along.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from option_audit import find_test, is_exercised

from rmqk.options.consumer import OPTIONS_BY_NAME
from rmqk.options.lite_pull import LITE_OPTIONS
from rmqk.options.producer import ProducerOptions
from rmqk.spi.options import OptionSpec, option_specs

E = "tests/test_option_effects.py::"
PUSH = "tests/test_push_consumer.py::"
LITE = "tests/test_lite_pull.py::"
FAULTS = "tests/test_producer_faults.py::"
CO = "tests/test_client_options.py::"

# Option -> the tests that show its effect, per table.
CONSUMER_EFFECT_TESTS: Mapping[str, tuple[str, ...]] = {
    "namesrv_addr": ("tests/test_acl_tls.py::test_acl_end_to_end",),
    "instance_name": (
        E + "test_client_ip_and_unit_name_form_the_client_id_the_broker_sees",
        "tests/test_orderly_broadcast.py::"
        "test_broadcasting_every_member_gets_everything_and_resumes_locally",
    ),
    "client_ip": (E + "test_client_ip_and_unit_name_form_the_client_id_the_broker_sees",),
    "unit_name": (E + "test_client_ip_and_unit_name_form_the_client_id_the_broker_sees",),
    "namespace": (
        "tests/test_namespace.py::test_namespaced_producer_and_consumer_exchange_messages",
    ),
    "access_channel": (E + "test_access_channel_cloud_sends_consume_traces_to_the_regions_topic",),
    "enable_msg_trace": (
        "tests/test_trace.py::test_traces_of_sends_successes_failures_and_retries",
        E + "test_access_channel_cloud_sends_consume_traces_to_the_regions_topic",
    ),
    "customized_trace_topic": (
        "tests/test_trace.py::test_lite_pull_traces_each_found_pull_as_java",
    ),
    "vip_channel_enabled": (
        E + "test_vip_channel_enabled_sends_offsets_and_send_backs_to_the_port_minus_two",
    ),
    "use_tls": (
        "tests/test_acl_tls.py::test_tls_and_acl_end_to_end",
        CO + "test_a_producer_with_use_tls_and_a_ca_file_publishes_to_a_tls_only_broker",
    ),
    "tls_ca_file": (
        CO + "test_a_producer_with_use_tls_and_a_ca_file_publishes_to_a_tls_only_broker",
    ),
    "tls_cert_file": (
        CO + "test_a_producer_with_use_tls_and_a_ca_file_publishes_to_a_tls_only_broker",
    ),
    "tls_key_file": (
        CO + "test_a_producer_with_use_tls_and_a_ca_file_publishes_to_a_tls_only_broker",
    ),
    "tls_verify": (
        CO + "test_a_producer_with_use_tls_and_a_ca_file_publishes_to_a_tls_only_broker",
    ),
    "access_key": (CO + "test_two_consumers_and_a_producer_each_with_its_own_account",),
    "secret_key": (CO + "test_two_consumers_and_a_producer_each_with_its_own_account",),
    "security_token": (CO + "test_two_consumers_and_a_producer_each_with_its_own_account",),
    "hook_plugins": (CO + "test_a_client_names_which_hook_plugins_apply",),
    "unit_mode": (E + "test_unit_mode_is_sent_in_heartbeats",),
    "poll_name_server_interval": (
        E + "test_poll_name_server_interval_sets_how_often_routes_are_fetched",
    ),
    "heartbeat_broker_interval": (
        E + "test_heartbeat_broker_interval_sets_how_often_heartbeats_come",
    ),
    "persist_consumer_offset_interval": (
        E + "test_persist_consumer_offset_interval_sets_how_often_offsets_are_committed",
    ),
    "pull_time_delay_mills_when_exception": (
        E + "test_pull_time_delay_mills_when_exception_spaces_failed_pulls",
    ),
    "mq_client_api_timeout": (E + "test_mq_client_api_timeout_bounds_each_request",),
    "message_model": (
        "tests/test_orderly_broadcast.py::"
        "test_broadcasting_every_member_gets_everything_and_resumes_locally",
    ),
    "consume_from_where": (PUSH + "test_timestamp_search_finds_the_first_message_stored_after_it",),
    "consume_timestamp": (PUSH + "test_timestamp_search_finds_the_first_message_stored_after_it",),
    "allocate_message_queue_strategy": (
        PUSH + "test_group_members_split_queues_as_the_strategy_says_and_converge_on_leave",
        E + "test_allocate_options_configure_the_allocation_strategy",
    ),
    "allocate_options": (E + "test_allocate_options_configure_the_allocation_strategy",),
    "offset_store": (E + "test_offset_store_and_its_options_choose_where_offsets_are_kept",),
    "offset_store_options": (
        E + "test_offset_store_and_its_options_choose_where_offsets_are_kept",
    ),
    "transport": (E + "test_transport_names_the_registered_transport_the_consumer_talks_through",),
    "transport_options": (
        E + "test_producer_with_the_vip_transport_option_sends_to_the_vip_listener",
    ),
    "consume_service": (
        "tests/test_consume_service_plugin.py::"
        "test_every_message_once_in_offset_batches_of_the_configured_size",
    ),
    "consume_service_options": (
        "tests/test_consume_service_plugin.py::"
        "test_every_message_once_in_offset_batches_of_the_configured_size",
    ),
    "consume_thread_min": (E + "test_consume_thread_min_is_how_many_listener_calls_run_at_once",),
    "consume_thread_max": (
        "tests/test_adaptive_pool.py::test_pool_grows_to_max_under_backlog_and_back_to_min",
    ),
    "adjust_thread_pool_nums_threshold": (
        "tests/test_adaptive_pool.py::test_pool_grows_to_max_under_backlog_and_back_to_min",
    ),
    "consume_concurrently_max_span": (
        E + "test_consume_concurrently_max_span_pauses_a_queue_whose_held_offsets_spread",
    ),
    "pull_threshold_for_queue": (
        PUSH + "test_slow_listener_keeps_process_queue_within_thresholds",
    ),
    "pull_threshold_size_for_queue": (E + "test_pull_thresholds_bound_what_a_queue_caches",),
    "pull_threshold_for_topic": (E + "test_pull_thresholds_bound_what_a_queue_caches",),
    "pull_threshold_size_for_topic": (E + "test_pull_thresholds_bound_what_a_queue_caches",),
    "pull_interval": (E + "test_pull_interval_spaces_the_pulls_of_a_queue",),
    "consume_message_batch_max_size": (PUSH + "test_consumes_everything_once_and_commits_the_end",),
    "pull_batch_size": (
        E + "test_pull_batch_size_and_post_subscription_when_pull_shape_each_pull",
        PUSH + "test_slow_listener_keeps_process_queue_within_thresholds",
    ),
    "max_decompressed_body_size": (
        "tests/test_faults_bad_records.py::test_a_smaller_cap_makes_a_large_body_a_bad_record",
    ),
    "post_subscription_when_pull": (
        E + "test_pull_batch_size_and_post_subscription_when_pull_shape_each_pull",
    ),
    "max_reconsume_times": (
        PUSH + "test_failed_messages_retry_with_growing_reconsume_times_then_dlq",
    ),
    "suspend_current_queue_time_millis": (
        "tests/test_orderly_broadcast.py::"
        "test_failing_orderly_listener_suspends_and_retries_the_same_message_first",
    ),
    "consume_timeout": (E + "test_consume_timeout_is_when_a_running_consume_counts_as_expired",),
    "await_termination_millis_when_shutdown": (
        E + "test_await_termination_millis_when_shutdown_lets_running_consumes_finish",
    ),
    "on_offsets_reset": (
        "tests/test_offsets_reset.py::test_push_consumer_resumes_every_queue_with_a_count",
        "tests/test_offsets_reset.py::test_lite_pull_resumes_every_queue_with_a_count",
    ),
}

LITE_EFFECT_TESTS: Mapping[str, tuple[str, ...]] = {
    "auto_commit": (LITE + "test_commit_then_restart_resumes_exactly_at_committed_offsets",),
    "auto_commit_interval_ms": (LITE + "test_auto_commit_reaches_the_broker_without_close",),
    "poll_timeout_ms": (E + "test_poll_timeout_ms_is_how_long_an_empty_poll_waits",),
    "pull_threshold_for_all": (
        E + "test_lite_fetch_thresholds_bound_what_is_buffered_before_polls",
    ),
    "consume_max_span": (E + "test_lite_fetch_thresholds_bound_what_is_buffered_before_polls",),
    "broker_suspend_max_time_millis": (
        E + "test_broker_suspend_max_time_millis_is_sent_with_each_pull",
        E + "test_consumer_timeout_millis_when_suspend_gives_up_on_a_held_pull",
    ),
    "consumer_timeout_millis_when_suspend": (
        E + "test_consumer_timeout_millis_when_suspend_gives_up_on_a_held_pull",
    ),
}

PRODUCER_EFFECT_TESTS: Mapping[str, tuple[str, ...]] = {
    "send_msg_timeout": (FAULTS + "test_the_send_timeout_is_one_budget_for_all_attempts",),
    "retry_times_when_send_failed": (
        FAULTS + "test_retry_counts_and_codes_are_options",
        FAULTS + "test_without_retries_a_refusing_broker_fails_the_send",
    ),
    "retry_times_when_send_async_failed": (FAULTS + "test_async_retry_count_is_an_option",),
    "retry_another_broker_when_not_store_ok": (
        FAULTS + "test_retry_another_broker_when_not_store_ok",
    ),
    "send_latency_fault_enable": (
        FAULTS + "test_latency_fault_tolerance_keeps_sends_off_a_slow_broker",
    ),
    "latency_max": (E + "test_latency_tables_set_how_long_a_broker_is_avoided",),
    "not_available_duration": (E + "test_latency_tables_set_how_long_a_broker_is_avoided",),
    "retry_response_codes": (FAULTS + "test_retry_counts_and_codes_are_options",),
    "compress_msg_body_over_howmuch": (
        E + "test_compress_msg_body_over_howmuch_compresses_bodies_above_it",
    ),
    "max_message_size": (E + "test_max_message_size_refuses_a_larger_body_before_sending",),
    "enable_msg_trace": (
        "tests/test_trace.py::test_traces_of_sends_successes_failures_and_retries",
    ),
    "customized_trace_topic": (
        E + "test_producer_customized_trace_topic_receives_its_send_traces",
    ),
    "default_topic_queue_nums": (E + "test_default_topic_queue_nums_sizes_an_auto_created_topic",),
    "vip_channel_enabled": (E + "test_producer_vip_channel_enabled_sends_to_the_port_minus_two",),
}

TABLES: Mapping[str, tuple[Mapping[str, OptionSpec], Mapping[str, tuple[str, ...]]]] = {
    "consumer": (OPTIONS_BY_NAME, CONSUMER_EFFECT_TESTS),
    "lite pull": (LITE_OPTIONS, LITE_EFFECT_TESTS),
    "producer": (option_specs(ProducerOptions), PRODUCER_EFFECT_TESTS),
}

CASES = [
    pytest.param(table, name, id=f"{table}:{name}")
    for table, (specs, _) in TABLES.items()
    for name in specs
]


@pytest.mark.parametrize(("table", "name"), CASES)
def test_every_option_is_shown_to_work_or_marked_compatibility_only(table: str, name: str) -> None:
    specs, registry = TABLES[table]
    spec = specs[name]
    tests = registry.get(name, ())
    if spec.compat_only is not None:
        assert not tests, f"{table} option {name} is marked compat_only but has effect tests"
        assert len(spec.compat_only) > 40, f"{name}: say why it has no effect"
        return
    assert tests, (
        f"{table} option {name} is neither shown to work by a test (add one to "
        f"tests/test_option_audit.py) nor marked compat_only with the reason"
    )
    for node_id in tests:
        assert find_test(node_id) is not None, f"{name}: no test {node_id}"
        assert is_exercised(node_id, spec), (
            f"{node_id} does not give {name} a value other than its default ({spec.default_repr})"
        )


@pytest.mark.parametrize("table", list(TABLES))
def test_the_registry_names_only_options_of_its_table(table: str) -> None:
    specs, registry = TABLES[table]
    assert set(registry) <= set(specs)


def test_the_known_compatibility_only_options() -> None:
    marked = {n for n, s in OPTIONS_BY_NAME.items() if s.compat_only is not None}
    assert marked == {
        "client_callback_executor_threads",
    }


def test_the_audit_reads_values_not_names() -> None:
    spec = OPTIONS_BY_NAME["pull_batch_size"]
    # This very function gives pull_batch_size its default (32) only, and a bad value.
    assert {"pull_batch_size": 32} != {"pull_batch_size": 5000}
    here = "tests/test_option_audit.py::test_the_audit_reads_values_not_names"
    assert find_test(here) is not None
    assert not is_exercised(here, spec)
    shaped = E + "test_pull_batch_size_and_post_subscription_when_pull_shape_each_pull"
    assert is_exercised(shaped, spec)
    assert find_test(E + "test_no_such_test") is None
