"""Shared fixture of the reproduction tests (one tiny end-to-end reproduction, 2 tasks x 2 seeds), the
tiers of the suite (pyproject ``markers``): ``integration`` by fixture, ``medium`` by name, and the
pytest-xdist groups of ``-n 2 --dist loadgroup`` (tests that must share one worker)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_repro(tmp_path_factory) -> Path:
    """``posym reproduce`` with the testing preset ``tiny`` (2-layer models, 30 steps, tiny analyses),
    both tasks, seeds 0 and 1, two worker processes, no LLM. Treat as read-only: copy it first."""
    from posym.verbs.reproduce import reproduce

    out = tmp_path_factory.mktemp("repro") / "dir"
    report = reproduce("tiny", out=out, seeds=2, jobs=2, llm=False, progress=False)
    assert report == out / "report.html"
    return out


@pytest.fixture
def repro_copy(tiny_repro, tmp_path) -> Path:
    """A private copy of the tiny reproduction that a test may change."""
    dst = tmp_path / "copy"
    shutil.copytree(tiny_repro, dst)
    return dst


#: Fixtures that make a test an integration test (a whole reproduction, a trained model in a fixture).
INTEGRATION_FIXTURES = {"tiny_repro", "repro_copy"}

#: pytest-xdist group of every test on the real single-node Slurm (tests/slurm_cluster.py): a test that uses a
#: fixture named ``cluster`` in a module that imports ``slurm_cluster``. Under ``--dist loadgroup`` one worker
#: runs them all, in file order, so that two clusters never run at once (slurmd names this host as its node).
SLURM_GROUP = "slurm"

#: Tests of about half a second or more on 2 idle cores (2 s or more in a ``--durations=0`` run of the
#: fast tier on the loaded 2-core machine): ``medium``, left out of the edit tier
#: ``-m "not slow and not integration and not extras and not medium"`` and kept in the default run.
#: ``file name: test functions`` (every parametrization) or ``function[param id]`` (that one); a test
#: function that no longer exists is an error.
MEDIUM_TESTS: dict[str, tuple[str, ...]] = {
    "test_head_sets_llm_readout.py": ("test_untouched_readout_equals_head_types_and_the_dose_readout_a_direct_score_call",
                                      "test_readout_n_zero_writes_nan_columns_and_no_note"),
    "test_ablate.py": ("test_ablation_for_run_and_plot",),
    "test_ablate_batched.py": ("test_batched_table_equals_the_loop",),
    "test_ablate_flow_families.py": ("test_ablate_cli_on_a_llama_folder",),
    "test_aggregate.py": ("test_a_table_that_mixes_interventions_is_kept_apart", "test_aggregate_writes_tables_and_figures"),
    "test_analysis_of_a_run_in_training.py": (
        "test_a_stale_lock_is_no_training",
        "test_an_analysis_elsewhere_says_the_run_is_unfinished[freqs]",
        "test_analysis_tables_record_the_step",
    ),
    "test_api_and_cli_messages.py": ("test_the_resume_note_names_the_ignored_options",),
    "test_api_client.py": ("test_rate_limit_real_clock",),
    "test_arch.py": ("test_cli_arch_is_stored", "test_trains_resumes_exactly_and_tracks_every_head"),
    "test_authors_options.py": (
        "test_best_checkpoint_is_the_first_maximum_and_analyses_use_it",
        "test_distractor_rule_reaches_the_training_data",
        "test_fp16_trains_close_to_fp32",
        "test_options_survive_resume_exactly",
        "test_select_derives_the_best_model_run",
    ),
    "test_checkpoint_series.py": ("test_series_of_named_folders_and_dynamics",),
    "test_cli.py": ("test_resume_missing_and_corrupt_checkpoint",),
    "test_cli_matrix.py": ("test_data_show_memory_scales_with_rows", "test_rerun_without_force_changes_nothing"),
    "test_data_safety.py": (
        "test_a_file_lock_refuses_a_live_holder_takes_over_a_stale_one_and_tidies_up",
        "test_checkpoints_with_missing_tensors_are_refused",
        "test_force_replaces_a_run",
        "test_scores_model_on_a_run_keeps_the_step",
    ),
    "test_dynamics_verb.py": (
        "test_dynamics_of_an_hf_trainer_dir_draws_its_eval_metrics",
        "test_dynamics_of_one_intervened_table_records_the_intervention",
        "test_dynamics_refuses_scores_of_several_interventions",
        "test_dynamics_without_any_accuracy_leaves_panel_a_out_and_says_so",
        "test_dynamics_writes_table_and_figure",
    ),
    "test_figures.py": (
        "test_fig2_panel_a_from_trainer_history_or_a_note",
        "test_fig8_and_fig4b_are_drawn_for_the_report_page_width",
    ),
    "test_freqs_theory_families.py": ("test_freqs_on_a_family_folder", "test_theory_discrepancy_run_on_a_family_folder"),
    "test_frequencies.py": ("test_run_freqs_writes_tables_and_figures", "test_run_freqs_plain_hf_dir_needs_task"),
    "test_gptj_model.py": ("test_checkpoint_loads_in_plain_transformers",),
    "test_graphs.py": ("test_auto_on_the_cpu_trains_exactly_as_off", "test_the_graph_steps_body_run_eagerly_equals_the_loops_step"),
    "test_head_sets_known_answer.py": ("test_the_study_finds_the_answer_head_and_its_pair[gptj-1]",
                                       "test_the_study_finds_the_answer_head_and_its_pair[llama-2]"),
    "test_head_sets_llm.py": ("test_llm_outcomes_equal_llm_eval_choice",),
    "test_head_sets_match.py": ("test_one_head_per_layer_runs_under_count_and_is_refused_under_layer",),
    "test_head_sets_readout.py": ("test_the_verb_writes_the_readout_and_caches_it",),
    "test_head_types_figures.py": ("test_panels_carry_the_threshold", "test_sink_ring_and_pure_counts_with_their_purity"),
    "test_hf_callback.py": (
        "test_callback_tracks_every_evaluation_without_changing_training",
        "test_resume_drops_rows_after_the_checkpoint",
    ),
    "test_intervene_verbs.py": (
        "test_a_freqs_refusal_writes_nothing",
        "test_freqs_two_interventions_none_rows_equal_and_a_mask_zeroes_the_dropped_ids",
    ),
    "test_interventions_study.py": ("test_a_string_setting_and_a_folder_of_other_files",),
    "test_lengthgen_identity.py": (
        "test_a_table_without_the_identity_columns_is_refused",
        "test_resume_refuses_a_corrupt_table_naming_row_and_column",
    ),
    "test_lengthgen_interventions.py": (
        "test_resume_keys_on_the_intervention",
        "test_rows_of_the_unfloored_temperature_of_an_old_table_are_never_mixed_with_floored_ones",
    ),
    "test_llm_choice.py": ("test_cli_choice_protocol_end_to_end",),
    "test_llm_heads.py": ("test_cli_llm_heads_end_to_end", "test_cli_llm_heads_gemma3_centred_min_mass"),
    "test_llm_intervene.py": (
        "test_identity_intervention_through_the_cache_free_path_answers_as_none",
        "test_llm_eval_two_interventions_none_rows_equal_plain_and_cache_keyed",
        "test_llm_heads_two_interventions_none_rows_equal_plain",
        "test_records_without_an_intervention_are_none",
    ),
    "test_no_pyplot.py": ("test_drawing_keeps_the_backend",),
    "test_pe.py": ("test_a_one_layer_nope_model_cannot_read_an_index_at_any_length",),
    "test_pe_study.py": (
        "test_a_length_table_of_two_interventions_shows_the_untouched_model",
        "test_another_lengthgen_table_feeds_fig5b_and_the_reach",
        "test_pe_study_beside_an_interventions_study_makes_one_page",
        "test_pe_study_writes_table_page_and_figures",
        "test_refusals",
    ),
    "test_pe_train.py": (
        "test_cli_pe_is_stored",
        "test_randomized_training_differs_and_evaluation_uses_plain_positions",
        "test_rope_base_default_trains_bit_identically_to_rope",
        "test_variant_resumes_exactly",
    ),
    "test_precision.py": (
        "test_bf16_resume_is_exact",
        "test_bf16_trains_close_to_fp32_and_keeps_fp32_weights",
        "test_compile_gives_the_same_losses_aot_eager",
        "test_tracking_under_bf16_scores_in_fp32",
    ),
    "test_progress.py": ("test_each_reproduce_worker_draws_its_bars_on_its_own_terminal_line",),
    "test_progress_bars.py": ("test_the_test_bars_name_their_task",),
    "test_reproduce.py": ("test_cli_reproduce_settings_overrides",),
    "test_resume.py": ("test_a_resume_after_a_kill_is_whole", "test_head_tracking_does_not_change_training"),
    "test_run_tables.py": ("test_a_run_and_a_verb_write_parquet_copies",),
    "test_scores_exact.py": (
        "test_fast_equals_reference_trained_gptj",
        "test_multi_query_equals_truncated_prompt",
        "test_blocks_fast_equals_reference",
    ),
    "test_sensitivity.py": ("test_a_lengthgen_variant_of_two_interventions_shows_one",),
    "test_task_balance.py": ("test_full_dataset_speed_and_sizes",),
    "test_task_generate.py": ("test_any_layout_solves", "test_extra_tokens_only_prepend"),
    "test_task_mismatch.py": ("test_a_trained_checkpoint_names_its_task_in_config_json",),
    "test_tensorboard_log.py": ("test_event_files_hold_the_training_values", "test_resume_purges_events_after_the_checkpoint"),
    "test_theory_constructions.py": (
        "test_index_exhaustive_small",
        "test_index_random_fast",
        "test_retrieval_exhaustive_small[3-1-5-0.3]",
        "test_retrieval_random_fast",
        "test_stacked_index_solves_number_task[4]",
        "test_stacked_index_twelve_layers_mixed_hops",
    ),
    "test_theory_discrepancy.py": ("test_fig5a_numbers",),
    "test_theory_intervened.py": (
        "test_a_refusal_while_computing_writes_nothing",
        "test_cli_intervene_writes_the_table_and_keeps_fig5a",
        "test_figure_panels_and_legend",
        "test_identity_parameters_give_the_untouched_delta_bit_for_bit",
        "test_temperature_is_the_closed_form_scaled_margin",
    ),
    "test_theory_restricted.py": ("test_restricted_verb_tiny", "test_train_toy_learns_index_quickly"),
    "test_theory_trained.py": ("test_cli_trained_discrepancy",),
    "test_trained_lengthgen.py": (
        "test_a_second_writer_of_one_length_table_is_refused_before_it_writes",
        "test_resume_refuses_an_unknown_intervention_string",
        "test_resume_refuses_points_measured_otherwise",
        "test_resume_reuses_points_and_equals_a_fresh_run",
        "test_resume_saves_each_point_and_survives_an_interruption",
    ),
}


def _check_medium(files: set[Path]) -> None:
    """UsageError when a ``MEDIUM_TESTS`` entry of a collected file names no test function of it."""
    for path in files:
        names = MEDIUM_TESTS.get(path.name, ())
        text = path.read_text(encoding="utf-8") if names else ""
        stale = [n for n in names if f"def {n.split('[')[0]}(" not in text]
        if stale:
            raise pytest.UsageError(f"tests/conftest.py MEDIUM_TESTS names {stale} in {path.name}, which has no such "
                                    "test; update the list")


def _is_medium(item) -> bool:
    names = MEDIUM_TESTS.get(Path(item.path).name, ())
    return bool(names) and (getattr(item, "originalname", None) in names or item.name in names)


def pytest_configure(config):
    """Register ``xdist_group`` when pytest-xdist is absent (a plain serial run), so that the mark stays quiet."""
    if not config.pluginmanager.hasplugin("xdist"):
        config.addinivalue_line("markers", "xdist_group(name): pytest-xdist runs a group's tests on one worker")


def _uses_slurm(item) -> bool:
    module = getattr(item, "module", None)
    return hasattr(module, "slurm_cluster") and "cluster" in getattr(item, "fixturenames", ())


# a wrapper: the marks are added before every other implementation (xdist's worker hook, which turns each
# ``xdist_group`` mark into the test's scope, included) and the group ids set after all of them
@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    """Tier the suite: a test that uses a reproduction fixture is ``integration``; one named in
    ``MEDIUM_TESTS`` is ``medium`` (see pyproject); one on the real Slurm joins the xdist group ``SLURM_GROUP``
    (:func:`_xdist_group_ids` makes the group hold)."""
    _check_medium({Path(item.path) for item in items})
    for item in items:
        if _uses_slurm(item):
            item.add_marker(pytest.mark.xdist_group(SLURM_GROUP))
        if INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
        if _is_medium(item):
            item.add_marker(pytest.mark.medium)
    result = yield
    _xdist_group_ids(config, items)
    return result


def _xdist_group_ids(config, items) -> None:
    """On an xdist worker under ``--dist loadgroup``: give each test with an ``xdist_group`` mark the
    ``@group`` suffix of its node id, as pytest-xdist itself does by assigning ``item._nodeid`` — which
    pytest >= 9.2 no longer reads (the node id is ``str(item._id)``), so the groups were silently ignored:
    the real-Slurm tests ran on both workers, two clusters at once, each module's fixtures set up twice.
    The scheduler groups tests by that suffix. A no-op where the suffix is already there or on older pytest."""
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # pytest < 9.2: xdist's own ``_nodeid`` assignment works
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and "@" not in item.nodeid.rpartition("]")[2] and hasattr(item, "_id"):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")
