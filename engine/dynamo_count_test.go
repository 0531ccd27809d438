package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The ledger behind docs/fidelity.md §13: every test of the Dynamo test
// files counted, how many assertions it makes, how many of them a mirror
// (a TestDynamo_ test here or in router/indexer) checks, and how many of
// those the mirror finds at Dynamo's figure under mocker's default and
// under dynamo_compat.
//
// Counting rule: each assert!, assert_eq!, assert_ne! (assert!(matches!(…))
// included) counts once each time it runs, whether it is written in the
// test or in a helper of the same test file; loops are unrolled, and each
// rstest case is a run of its own. Checks inside the crate's shared test
// utilities (test_utils.rs: the router-indexer harness, the live-scheduler
// drain helper) are not counted, except the harness's
// assert_no_event_errors and assert_no_event_warnings where a test calls
// them itself. approx.rs's spin_until, which fails its test when the
// condition never holds, counts as one check. An assertion is mirrored when
// the mirror checks the same fact on the same workload; one that reads a
// structure mocker does not have (a compressed radix edge, a forward-pass
// snapshot, a request's lease) is not. Where a mirror asserts a different
// figure by default and Dynamo's under dynamo_compat, the assertion counts
// against the default and for dynamo_compat. Levels below the scheduler
// (the block pool, the page cache, the router's indexers) have no
// dynamo_compat switch: their two columns are the same by construction.
//
// TestDynamoCount checks the ledger against the mirrors (each mirror exists
// and names the Dynamo test it follows; every mirror is in the ledger or
// in dynamoUncounted) and against §13's table and list of differences.

// Areas, as §13's table names them.
const (
	areaSGScheduling = "SGLang scheduling"
	areaSGCore       = "SGLang core behaviour"
	areaSGEvents     = "SGLang router events"
	areaSGFPM        = "SGLang forward-pass figures"
	areaSGHolds      = "SGLang source holds"
	areaSGDest       = "SGLang destination lifecycle"
	areaSGRadix      = "SGLang radix tree"
	areaSGKV         = "SGLang KV manager"
	areaVTop         = "vLLM request storage, zero-output and MTP requests"
	areaVHolds       = "vLLM source holds"
	areaVDest        = "vLLM destination lifecycle"
	areaVCore        = "vLLM core behaviour"
	areaVFPM         = "vLLM forward-pass figures"
	areaVEvents      = "vLLM router events"
	areaVLive        = "vLLM live scheduler"
	areaVKV          = "vLLM KV manager"
	areaTRT          = "TRT-LLM capacity policy"
	areaApprox       = "approximate indexer"
	areaRTree        = "router radix tree"
)

type dynamoCount struct {
	area    string
	test    string // Dynamo's test
	asserts int
	// mirrored of asserts are checked by mirror; dflt and compat of those
	// match Dynamo under mocker's default and under dynamo_compat.
	mirrored, dflt, compat int
	mirror                 string // "" when no mirror
}

var dynamoLedger = []dynamoCount{
	// lib/mocker/src/scheduler/sglang/tests.rs
	{areaSGScheduling, "test_sglang_scheduler_fifo_ordering", 1, 1, 1, 1, "TestDynamo_SGLangSchedulerFIFOOrdering"},
	{areaSGScheduling, "test_lpm_reorders_by_current_sequence_prefix_match", 2, 2, 2, 2, "TestDynamo_LPMReordersByCurrentSequencePrefixMatch"},
	// Differs in both: mocker's lpm does not move requests sharing an
	// uncached prefix behind the rest (item 12).
	{areaSGScheduling, "test_lpm_deprioritizes_duplicate_short_prefixes", 1, 1, 0, 0, "TestDynamo_LPMDeprioritizesDuplicateShortPrefixes"},

	{areaSGCore, "test_chunked_prefill_budget_is_page_aware", 3, 3, 3, 3, "TestDynamo_ChunkedPrefillBudgetIsPageAware"},
	{areaSGCore, "test_chunked_prefill_subpage_budget_defers_next_request", 4, 4, 4, 4, "TestDynamo_ChunkedPrefillSubpageBudgetDefersNextRequest"},
	// The third decode step's 12 allocated tokens come a pass later by default.
	{areaSGCore, "test_decode_allocation_is_page_aware", 5, 5, 4, 5, "TestDynamo_DecodeAllocationIsPageAware"},
	{areaSGCore, "test_decode_speedup_ratio_scales_sglang_decode_time", 2, 2, 2, 2, "TestDynamo_DecodeSpeedupRatioScalesSGLangDecodeTime"},
	{areaSGCore, "test_check_decode_mem_preserves_generated_output_on_retract", 4, 4, 4, 4, "TestDynamo_CheckDecodeMemPreservesGeneratedOutputOnRetract"},
	{areaSGCore, "test_unfinished_decode_request_is_cached_after_output", 1, 1, 1, 1, "TestDynamo_UnfinishedDecodeRequestIsCachedAfterOutput"},
	{areaSGCore, "test_active_decode_blocks_tracks_page_reserved_occupancy_in_blocks", 2, 2, 2, 2, "TestDynamo_ActiveDecodeBlocksTracksPageReservedOccupancyInBlocks"},
	{areaSGCore, "test_mtp_batch_applies_request_bursts_in_stable_order", 9, 0, 0, 0, ""},
	// Not mirrored: the pass-end visibility flag and the worker id.
	{areaSGCore, "test_sglang_pass_visibility_is_pass_end", 4, 2, 2, 2, "TestDynamo_SGLangPassVisibilityIsPassEnd"},

	// 8 cases of 4; the pool's total_blocks > 0 is not checked.
	{areaSGEvents, "test_sglang_scheduler_token_generation_patterns", 32, 24, 24, 24, "TestDynamo_SGLangSchedulerTokenGenerationPatterns"},
	// By default the second page and its Stored event come a pass later.
	{areaSGEvents, "test_chunked_prefill_events_apply_cleanly", 4, 4, 2, 4, "TestDynamo_ChunkedPrefillEventsApplyCleanly"},
	{areaSGEvents, "test_decode_growth_events_apply_cleanly", 3, 3, 1, 3, "TestDynamo_DecodeGrowthEventsApplyCleanly"},
	{areaSGEvents, "test_completed_output_block_uses_router_token_identity", 1, 1, 0, 1, "TestDynamo_CompletedOutputBlockUsesRouterTokenIdentity"},
	// Not mirrored: the decode-step helper's two setup checks.
	{areaSGEvents, "test_retract_frees_do_not_leave_stale_blocks", 4, 2, 2, 2, "TestDynamo_RetractFreesDoNotLeaveStaleBlocks"},
	{areaSGEvents, "test_completion_tail_free_does_not_remove_unpublished_blocks", 3, 3, 3, 3, "TestDynamo_CompletionTailFreeDoesNotRemoveUnpublishedBlocks"},
	// Not mirrored: the hand-driven decode, setup and retraction counts.
	{areaSGEvents, "test_mixed_chunk_decode_retract_reprefill_complete_events_apply_cleanly", 6, 3, 3, 3, "TestDynamo_MixedChunkDecodeRetractReprefillCompleteEventsApplyCleanly"},
	{areaSGEvents, "test_mtp_lifecycle_drains_with_clean_router_events", 7, 0, 0, 0, ""},
	{areaSGEvents, "test_live_pathological_load_no_router_event_errors", 3, 3, 3, 3, "TestDynamo_LivePathologicalLoadNoRouterEventErrors"},
	{areaSGEvents, "test_prefill_completion_emits_handoff_delay", 2, 2, 2, 2, "TestDynamo_PrefillCompletionEmitsHandoffDelay"},

	// Not mirrored here and in the next: the prefill-request counts; the
	// decode-request counts are read from the tokens a pass samples.
	{areaSGFPM, "test_fpm_single_prefill_request", 6, 5, 5, 5, "TestDynamo_SGLangFPMSinglePrefillRequest"},
	// Differs in both: Dynamo's pass that prefills the second request
	// also decodes the first; mocker's extend pass, as SGLang's, does not.
	// Not mirrored: the prefill-request counts and the decode KV context.
	{areaSGFPM, "test_fpm_prefill_and_decode_mixed_batch", 4, 1, 0, 0, "TestDynamo_SGLangFPMPrefillAndDecodeMixedBatch"},
	// Not mirrored: the first pass's total of 8 tokens looked up.
	{areaSGFPM, "test_mocker_metrics_reports_prefix_cache_reuse", 4, 3, 3, 3, "TestDynamo_MockerMetricsReportsPrefixCacheReuse"},
	{areaSGFPM, "test_fpm_empty_pass_is_zeroed", 6, 0, 0, 0, ""},
	{areaSGFPM, "test_fpm_queued_requests", 2, 2, 2, 2, "TestDynamo_FPMQueuedRequests"},
	{areaSGFPM, "test_fpm_var_prefill_length_with_multiple_requests", 2, 0, 0, 0, ""},
	// Not mirrored: the two prefill-request counts.
	{areaSGFPM, "test_fpm_chunked_prefill_reports_chunk_not_full_prompt", 6, 4, 4, 4, "TestDynamo_FPMChunkedPrefillReportsChunkNotFullPrompt"},
	{areaSGFPM, "test_fpm_retracted_decode_becomes_queued_decode", 2, 0, 0, 0, ""},
	{areaSGFPM, "test_fpm_sent_through_sink", 4, 0, 0, 0, ""},

	// By default the first pass completes and holds 2 pages, all cached.
	{areaSGHolds, "terminal_completion_holds_source_without_running_cleanup", 7, 7, 4, 7, "TestDynamo_SGLangTerminalCompletionHoldsSourceWithoutRunningCleanup"},
	// Differs in both: an early release lets Dynamo's request run unheld.
	{areaSGHolds, "cancel_and_early_release_cleanup_exactly_once", 6, 6, 5, 5, "TestDynamo_SGLangCancelAndEarlyReleaseCleanupExactlyOnce"},
	{areaSGHolds, "ordinary_completion_keeps_default_cleanup", 2, 2, 1, 2, "TestDynamo_SGLangOrdinaryCompletionKeepsDefaultCleanup"},
	{areaSGHolds, "active_request_id_is_rejected_before_source_hold_registration", 4, 4, 4, 4, "TestDynamo_SGLangActiveRequestIDIsRejectedBeforeSourceHoldRegistration"},

	// Differs in both: Dynamo's decode worker announces the transferred
	// pages at activation. Not mirrored: the blocked pass's three checks
	// (mocker's reservation pass is that pass), the page ids at activation
	// and admission, and the admission's reused input tokens.
	{areaSGDest, "handoff_prefill_to_reserved_decode_owns_kv_until_prebuilt_admission", 36, 30, 29, 29, "TestDynamo_SGLangHandoffPrefillToReservedDecodeOwnsKVUntilPrebuiltAdmission"},

	// lib/mocker/src/cache/radix_cache.rs
	// Not mirrored: the pool's 10 before any allocation.
	{areaSGRadix, "test_token_pool_allocate_and_free", 7, 6, 6, 6, "TestDynamo_TokenPoolAllocateAndFree"},
	{areaSGRadix, "test_match_prefix_empty_tree", 2, 2, 2, 2, "TestDynamo_MatchPrefixEmptyTree"},
	{areaSGRadix, "test_match_prefix_full_match", 1, 1, 1, 1, "TestDynamo_MatchPrefixFullMatch"},
	// Not mirrored: the split edge's key and value.
	{areaSGRadix, "test_match_prefix_with_split", 4, 2, 2, 2, "TestDynamo_MatchPrefixWithSplit"},
	{areaSGRadix, "test_insert_shared_prefix", 3, 3, 3, 3, "TestDynamo_InsertSharedPrefix"},
	{areaSGRadix, "test_insert_extends_existing", 1, 1, 1, 1, "TestDynamo_InsertExtendsExisting"},
	// Differs in both: 2 nodes (root and one edge) in Dynamo, 3 pages here.
	{areaSGRadix, "test_insert_duplicate", 1, 1, 0, 0, "TestDynamo_InsertDuplicate"},
	{areaSGRadix, "test_match_then_insert_suffix", 2, 2, 2, 2, "TestDynamo_MatchThenInsertSuffix"},
	{areaSGRadix, "test_page_insert_and_match", 4, 4, 4, 4, "TestDynamo_PageInsertAndMatch"},
	{areaSGRadix, "test_page_children_disambiguate", 3, 3, 3, 3, "TestDynamo_PageChildrenDisambiguate"},
	{areaSGRadix, "test_page_split_value", 1, 1, 1, 1, "TestDynamo_PageSplitValue"},
	{areaSGRadix, "test_lock_unlock_shared_prefix", 3, 3, 3, 3, "TestDynamo_LockUnlockSharedPrefix"},
	{areaSGRadix, "test_evict_lru_order", 3, 3, 3, 3, "TestDynamo_EvictLRUOrder"},
	{areaSGRadix, "test_evict_respects_locks", 2, 2, 2, 2, "TestDynamo_EvictRespectsLocks"},
	{areaSGRadix, "test_query_methods", 4, 4, 4, 4, "TestDynamo_QueryMethods"},

	// lib/mocker/src/kv_manager/sglang_backend.rs
	{areaSGKV, "active_kv_lease_has_no_space_overhead", 1, 0, 0, 0, ""},
	// Not mirrored: the lease's cached tokens and length, retract's result.
	{areaSGKV, "retract_lease_releases_only_the_uncached_suffix", 8, 5, 5, 5, "TestDynamo_RetractLeaseReleasesOnlyTheUncachedSuffix"},
	// Not mirrored: the compressed tree's node counts (3) and deepest
	// nodes (2), and retract's result.
	{areaSGKV, "retained_tail_split_releases_leases_before_eviction", 14, 8, 8, 8, "TestDynamo_RetainedTailSplitReleasesLeasesBeforeEviction"},
	{areaSGKV, "test_allocate_cache_miss", 3, 3, 3, 3, "TestDynamo_AllocateCacheMiss"},
	// Not mirrored: the first lease's 5 pages.
	{areaSGKV, "test_allocate_cache_hit", 4, 3, 3, 3, "TestDynamo_AllocateCacheHit"},
	{areaSGKV, "destination_transfer_footprint_uses_missing_physical_pages", 3, 3, 3, 3, "TestDynamo_DestinationTransferFootprintUsesMissingPhysicalPages"},
	{areaSGKV, "test_free_request_without_caching", 1, 0, 0, 0, ""},
	// Differs in both: Dynamo publishes Stored at allocation, mocker when
	// the pages are cached.
	{areaSGKV, "test_event_publishing", 3, 3, 2, 2, "TestDynamo_EventPublishing"},
	{areaSGKV, "test_event_publishing_uses_router_block_hashes", 4, 4, 4, 4, "TestDynamo_EventPublishingUsesRouterBlockHashes"},
	// Not mirrored: two return values of the publishing call.
	{areaSGKV, "test_published_prefix_hashes_only_unseen_suffix", 7, 5, 5, 5, "TestDynamo_PublishedPrefixHashesOnlyUnseenSuffix"},
	{areaSGKV, "test_cache_materialization_processes_only_newly_completed_blocks", 4, 4, 4, 4, "TestDynamo_CacheMaterializationProcessesOnlyNewlyCompletedBlocks"},
	{areaSGKV, "test_local_hashes_reject_out_of_domain_tokens", 0, 0, 0, 0, ""},
	// Differs in both: Stored at allocation, as above. Not mirrored: the
	// event count after the first request's pages are freed.
	{areaSGKV, "test_duplicate_logical_blocks_publish_once_and_remove_once", 5, 4, 3, 3, "TestDynamo_DuplicateLogicalBlocksPublishOnceAndRemoveOnce"},
	// Differs in both: Stored at allocation, as above (nothing at the
	// allocation, the 3 blocks at the first completion).
	{areaSGKV, "test_duplicate_completion_releases_unretained_indices_and_removes_on_eviction", 13, 13, 11, 11, "TestDynamo_DuplicateCompletionReleasesUnretainedIndicesAndRemovesOnEviction"},
	{areaSGKV, "retained_tail_eviction_preserves_page_granular_prefix_reuse", 12, 12, 12, 12, "TestDynamo_RetainedTailEvictionPreservesPageGranularPrefixReuse"},
	// Differs in both: Stored at allocation, as above. Not mirrored: the
	// results of retract and abort.
	{areaSGKV, "unfinished_duplicate_canonicalization_prevents_missing_parent", 8, 6, 5, 5, "TestDynamo_UnfinishedDuplicateCanonicalizationPreventsMissingParent"},
	{areaSGKV, "invalid_canonical_path_is_fatal", 0, 0, 0, 0, ""},
	{areaSGKV, "cache_unfinished_rejects_invalid_range_before_publishing", 2, 0, 0, 0, ""},
	{areaSGKV, "cache_unfinished_rejects_short_indices_before_publishing", 2, 0, 0, 0, ""},
	{areaSGKV, "test_allocate_oom", 1, 1, 1, 1, "TestDynamo_AllocateOOM"},
	{areaSGKV, "test_chunked_prefill_parent_hash", 5, 5, 5, 5, "TestDynamo_ChunkedPrefillParentHash"},
	{areaSGKV, "fresh_allocation_protects_matched_prefix_before_eviction", 5, 5, 5, 5, "TestDynamo_FreshAllocationProtectsMatchedPrefixBeforeEviction"},
	{areaSGKV, "finish_drops_partial_tail_page_and_caches_compact_complete_page", 5, 5, 5, 5, "TestDynamo_FinishDropsPartialTailPageAndCachesCompactCompletePage"},

	// lib/mocker/src/scheduler/vllm/tests.rs
	{areaVTop, "shared_vllm_core_exposes_kv_events_at_pass_end", 6, 0, 0, 0, ""},
	{areaVTop, "engine_adapter_constructs_native_request_state", 1, 0, 0, 0, ""},
	{areaVTop, "flat_tokens_cover_every_native_g1_configuration", 8, 0, 0, 0, ""},
	{areaVTop, "minimum_shared_scheduler_block_size_constructs_requests_for_both_backends", 2, 0, 0, 0, ""},
	{areaVTop, "flat_storage_capacity_is_bounded_by_realizable_output", 15, 0, 0, 0, ""},
	{areaVTop, "zero_output_request_completes_after_prefill", 12, 0, 0, 0, ""},
	{areaVTop, "fully_cached_zero_output_request_is_not_decode_fpm_work", 6, 0, 0, 0, ""},
	{areaVTop, "speculative_batch_drains_zero_output_before_emitting_tokens", 7, 0, 0, 0, ""},

	// By default the first pass completes and holds the prompt's 2 blocks,
	// not 3. Not mirrored: the request leaving the scheduler's table.
	{areaVHolds, "terminal_completion_holds_source_without_freeing_kv", 11, 10, 6, 10, "TestDynamo_TerminalCompletionHoldsSourceWithoutFreeingKV"},
	// Differs in both: an early release lets Dynamo's request run unheld.
	{areaVHolds, "cancel_and_early_release_cleanup_exactly_once", 8, 8, 7, 7, "TestDynamo_VLLMCancelAndEarlyReleaseCleanupExactlyOnce"},
	{areaVHolds, "active_request_id_is_rejected_before_source_hold_registration", 4, 4, 4, 4, "TestDynamo_VLLMActiveRequestIDIsRejectedBeforeSourceHoldRegistration"},

	// Differs in both: mocker never reserves the destination, so its
	// activation is refused.
	{areaVDest, "materialized_prompt_above_max_model_len_is_rejected", 4, 4, 2, 2, "TestDynamo_VLLMMaterializedPromptAboveMaxModelLenIsRejected"},
	{areaVDest, "handoff_prefill_to_reserved_decode_owns_kv_until_normal_admission", 14, 14, 14, 14, "TestDynamo_VLLMHandoffPrefillToReservedDecodeOwnsKVUntilNormalAdmission"},
	// waiting_requests leaves reservations out by default (3 checks). Not
	// mirrored: the 11 forward-pass queue figures.
	{areaVDest, "destination_lifecycle_is_counted_once_as_queued_decode", 21, 10, 7, 10, "TestDynamo_DestinationLifecycleCountedOnceAsWaiting"},
	{areaVDest, "destination_transfer_footprint_excludes_decode_headroom", 2, 2, 2, 2, "TestDynamo_DestinationTransferFootprintExcludesDecodeHeadroom"},
	// Not mirrored: is_drained.
	{areaVDest, "destination_cancel_reaches_activated_request_exactly_once", 8, 7, 7, 7, "TestDynamo_VLLMDestinationCancelReachesActivatedRequestExactlyOnce"},
	{areaVDest, "cancel_running_destination_immediately_retries_pending_head", 6, 6, 6, 6, "TestDynamo_VLLMCancelRunningDestinationImmediatelyRetriesPendingHead"},
	{areaVDest, "trtllm_destination_reservation_fails_without_acquiring_kv", 4, 0, 0, 0, ""},

	{areaVCore, "test_planned_output_tokens_are_emitted_exactly", 4, 0, 0, 0, ""},
	// Not mirrored: the running queue's order.
	{areaVCore, "test_unified_pass_keeps_partial_prefill_in_running", 10, 9, 9, 9, "TestDynamo_VLLMUnifiedPassKeepsPartialPrefillInRunning"},
	{areaVCore, "test_running_requests_consume_budget_before_waiting", 2, 2, 2, 2, "TestDynamo_VLLMRunningRequestsConsumeBudgetBeforeWaiting"},
	// Not mirrored: the three admission-time checks (mocker records no
	// admission instant).
	{areaVCore, "test_execute_pass_batches_two_ready_requests_together", 9, 6, 6, 6, "TestDynamo_VLLMExecutePassBatchesTwoReadyRequestsTogether"},
	{areaVCore, "test_prefill_completion_emits_handoff_delay", 2, 2, 2, 2, "TestDynamo_VLLMPrefillCompletionEmitsHandoffDelay"},
	{areaVCore, "test_first_token_can_arrive_on_prompt_completion_pass", 4, 4, 4, 4, "TestDynamo_VLLMFirstTokenCanArriveOnPromptCompletionPass"},
	{areaVCore, "test_preemption_requeues_newest_running_request", 5, 5, 5, 5, "TestDynamo_VLLMPreemptionRequeuesNewestRunningRequest"},
	// Not mirrored: the follower's place in the waiting queue.
	{areaVCore, "test_waiting_full_isl_gate_blocks_without_preemption_then_admits", 10, 9, 9, 9, "TestDynamo_VLLMWaitingFullISLGateBlocksWithoutPreemptionThenAdmits"},
	{areaVCore, "test_fresh_request_larger_than_pool_is_rejected_and_follower_runs", 3, 3, 3, 3, "TestDynamo_VLLMFreshRequestLargerThanPoolIsRejectedAndFollowerRuns"},
	{areaVCore, "test_completion_returns_scheduler_to_idle", 3, 3, 3, 3, "TestDynamo_VLLMCompletionReturnsSchedulerToIdle"},
	{areaVCore, "test_mtp_batch_applies_request_bursts_in_stable_order", 5, 0, 0, 0, ""},
	{areaVCore, "test_mtp_releases_unused_block_reservations", 4, 0, 0, 0, ""},
	{areaVCore, "test_mtp_recomputes_last_prefix_cache_block", 4, 0, 0, 0, ""},

	// Not mirrored here and below: request counts and KV context of the
	// forward-pass snapshot, which an Output does not carry.
	{areaVFPM, "test_fpm_single_prefill_request", 7, 5, 5, 5, "TestDynamo_VLLMFPMSinglePrefillRequest"},
	{areaVFPM, "test_fpm_prefill_and_decode_mixed_batch", 6, 3, 3, 3, "TestDynamo_VLLMFPMPrefillAndDecodeMixedBatch"},
	{areaVFPM, "test_fpm_completed_requests_metrics_correct", 3, 2, 2, 2, "TestDynamo_VLLMFPMCompletedRequestsMetricsCorrect"},
	{areaVFPM, "test_fpm_completed_decode_request_has_kv_context", 2, 1, 1, 1, "TestDynamo_VLLMFPMCompletedDecodeRequestHasKVContext"},
	{areaVFPM, "test_fpm_queued_requests", 1, 1, 1, 1, "TestDynamo_VLLMFPMQueuedRequests"},
	{areaVFPM, "test_fpm_var_prefill_length_with_multiple_requests", 2, 0, 0, 0, ""},
	{areaVFPM, "test_fpm_chunked_prefill_reports_chunk_not_full_prompt", 8, 4, 4, 4, "TestDynamo_VLLMFPMChunkedPrefillReportsChunkNotFullPrompt"},
	{areaVFPM, "test_fpm_preemption_creates_queued_decode", 2, 0, 0, 0, ""},
	// Not mirrored here and in the next: that only the first output
	// signal carries the cached-token figure (mocker's is on the
	// Completion).
	{areaVFPM, "test_first_signal_carries_admission_cache_truth", 4, 2, 2, 2, "TestDynamo_VLLMFirstSignalCarriesAdmissionCacheTruth"},
	{areaVFPM, "test_preempted_request_keeps_original_admission_cache_truth", 6, 5, 5, 5, "TestDynamo_VLLMPreemptedRequestKeepsOriginalAdmissionCacheTruth"},

	// Not mirrored: the pass-start visibility flag and the worker id.
	{areaVEvents, "test_vllm_pass_visibility_is_pass_start", 4, 2, 2, 2, "TestDynamo_VLLMPassVisibilityIsPassStart"},
	{areaVEvents, "test_completion_events_apply_cleanly", 4, 4, 4, 4, "TestDynamo_VLLMCompletionEventsApplyCleanly"},
	{areaVEvents, "test_preemption_recompute_events_apply_cleanly", 7, 7, 7, 7, "TestDynamo_VLLMPreemptionRecomputeEventsApplyCleanly"},
	{areaVEvents, "test_mtp_preemption_recompute_drains_with_clean_events", 8, 0, 0, 0, ""},

	{areaVLive, "test_scheduler_token_generation_patterns", 20, 20, 20, 20, "TestDynamo_VLLMSchedulerTokenGenerationPatterns"},
	{areaVLive, "test_scheduler_mtp_lifecycle_drains_small_blocks", 0, 0, 0, 0, ""},
	{areaVLive, "test_cache_hit_rate_with_identical_requests", 4, 4, 4, 4, "TestDynamo_VLLMCacheHitRateWithIdenticalRequests"},
	{areaVLive, "test_receiver_drop_cleans_up_resources", 3, 0, 0, 0, ""},
	{areaVLive, "test_live_scheduler_forwards_buffered_kv_token_ids", 3, 0, 0, 0, ""},
	{areaVLive, "test_live_pathological_load_no_router_event_errors", 3, 3, 3, 3, "TestDynamo_VLLMLivePathologicalLoadNoRouterEventErrors"},

	// lib/mocker/src/kv_manager.rs
	{areaVKV, "test_failure_on_max_capacity", 3, 3, 3, 3, "TestDynamo_FailureOnMaxCapacity"},
	{areaVKV, "test_block_lifecycle_stringent", 53, 53, 53, 53, "TestDynamo_BlockLifecycleStringent"},

	// lib/mocker/src/scheduler/trtllm/tests.rs
	{areaTRT, "admits_only_what_fits_to_completion", 4, 4, 4, 4, "TestDynamo_TRTLLMAdmitsOnlyWhatFitsToCompletion"},
	{areaTRT, "vllm_admits_optimistically_unlike_trtllm", 1, 1, 1, 1, "TestDynamo_TRTLLMAdmitsOnlyWhatFitsToCompletion"},
	{areaTRT, "preemption_inducing_workload_never_preempts", 3, 3, 3, 3, "TestDynamo_TRTLLMPreemptionInducingWorkloadNeverPreempts"},
	{areaTRT, "no_evict_admission_cap_matches_hardware", 3, 3, 3, 3, "TestDynamo_TRTLLMNoEvictAdmissionCapMatchesHardware"},
	// Differs in both: refused at the head of the queue in the next pass,
	// not on arrival.
	{areaTRT, "enqueue_rejects_prompt_with_no_decode_room", 3, 3, 2, 2, "TestDynamo_TRTLLMRejectsPromptWithNoDecodeRoom"},
	{areaTRT, "enqueue_clamps_excess_output_to_capacity", 3, 3, 3, 3, "TestDynamo_TRTLLMClampsExcessOutputToCapacity"},

	// lib/kv-router/src/approx.rs
	{areaApprox, "test_prune_manager_expiry", 7, 7, 7, 7, "TestDynamo_PruneManagerExpiry"},
	// Not mirrored: the refreshed expiry instant.
	{areaApprox, "test_prune_manager_update_resets_ttl", 3, 2, 2, 2, "TestDynamo_PruneManagerUpdateResetsTTL"},
	{areaApprox, "test_approx_kv_indexer_basic_flow", 3, 3, 3, 3, "TestDynamo_ApproxKvIndexerBasicFlow"},
	{areaApprox, "test_remove_worker", 2, 2, 2, 2, "TestDynamo_RemoveWorkerPreservesOtherWorkers"},
	{areaApprox, "test_remove_worker_preserves_other_workers", 2, 2, 2, 2, "TestDynamo_RemoveWorkerPreservesOtherWorkers"},
	// Not mirrored: the wait for the first sequence's own score.
	{areaApprox, "test_common_prefix_overlap", 2, 1, 1, 1, "TestDynamo_CommonPrefixOverlap"},
	{areaApprox, "test_multiple_workers_same_block", 3, 3, 3, 3, "TestDynamo_MultipleWorkersSameBlock"},
	{areaApprox, "test_prune_manager_no_prune_when_within_bounds", 51, 51, 51, 51, "TestDynamo_PruneManagerNoPruneWhenWithinBounds"},
	{areaApprox, "test_prune_manager_prune_removes_oldest_first", 16, 0, 0, 0, ""},
	{areaApprox, "test_prune_manager_prune_fails_without_config", 2, 0, 0, 0, ""},
	{areaApprox, "test_block_entry_ordering", 1, 0, 0, 0, ""},
	{areaApprox, "test_approx_indexer_e2e_pruning", 11, 11, 11, 11, "TestDynamo_ApproxIndexerE2EPruning"},
	{areaApprox, "test_prune_manager_prune_reinsertion_updates_position", 11, 0, 0, 0, ""},

	// lib/kv-router/src/radix_tree.rs, the two tests mirrored. Not
	// mirrored: the worker count and the root's and first child's shape.
	{areaRTree, "test_radix_tree", 40, 14, 14, 14, "TestDynamo_RadixTree"},
	{areaRTree, "test_radix_tree_apply_event_errors", 5, 5, 5, 5, "TestDynamo_RadixTreeApplyEventErrors"},
}

// dynamoUncounted are mirrors of Dynamo tests outside the versions
// counted: Dynamo test → mirror.
var dynamoUncounted = map[string]string{
	"cancellation_releases_noncanonical_cached_prefix_indices":                         "TestDynamo_CancellationReleasesNoncanonicalCachedPrefixIndices",
	"test_chunked_prefill_admits_next_chunk_when_full_prompt_does_not_fit":             "TestDynamo_ChunkedPrefillAdmitsNextChunkWhenFullPromptDoesNotFit",
	"destination_lifecycle_is_counted_once_as_queued_decode (SGLang)":                  "TestDynamo_SGLangDestinationLifecycleIsCountedOnceAsQueuedDecode",
	"destination_transfer_footprint_excludes_decode_headroom (SGLang)":                 "TestDynamo_SGLangDestinationTransferFootprintExcludesDecodeHeadroom",
	"destination_cancel_reaches_activated_request_exactly_once (SGLang)":               "TestDynamo_SGLangDestinationCancelReachesActivatedRequestExactlyOnce",
	"kv_blocked_live_scheduler_waits_and_cancel_wakes_it":                              "TestDynamo_SGLangKVBlockedLiveSchedulerWaitsAndCancelWakesIt",
	"test_native_destination_cancel_preserves_tail_first_eviction":                     "TestDynamo_VLLMNativeDestinationCancelPreservesTailFirstEviction",
	"handoff_prefill_to_reserved_decode_owns_kv_until_normal_admission (earlier form)": "TestDynamo_HandoffPrefillToReservedDecodeOwnsKVUntilNormalAdmission",
}

// mirrorDocs maps each TestDynamo_ function of the mirror files to its doc
// comment.
func mirrorDocs(t *testing.T) map[string]string {
	files, err := filepath.Glob("dynamo_*_test.go")
	require.NoError(t, err)
	files = append(files, filepath.Join("..", "router", "indexer", "dynamo_mirror_test.go"))
	docs := map[string]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if ok && strings.HasPrefix(fn.Name.Name, "TestDynamo_") {
				docs[fn.Name.Name] = fn.Doc.Text()
			}
		}
	}
	return docs
}

// countTable is §13's table: area → its five figures (Dynamo tests,
// assertions, mirrored, match by default, match under dynamo_compat), and
// the section's text.
func countTable(t *testing.T) (map[string][5]int, string) {
	raw, err := os.ReadFile(filepath.Join("..", "docs", "fidelity.md"))
	require.NoError(t, err)
	doc := string(raw)
	start := strings.Index(doc, "\n## 13. ")
	require.GreaterOrEqual(t, start, 0, "fidelity.md has a §13")
	section := doc[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	rows := map[string][5]int{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), "|")
		if !strings.HasPrefix(line, "|") || len(cells) != 7 {
			continue
		}
		var figs [5]int
		ok := true
		for i := range figs {
			figs[i], err = strconv.Atoi(strings.TrimSpace(cells[2+i]))
			ok = ok && err == nil
		}
		if ok {
			rows[strings.TrimSpace(cells[0])] = figs
		}
	}
	return rows, section
}

func TestDynamoCount(t *testing.T) {
	docs := mirrorDocs(t)
	table, section := countTable(t)
	sums := map[string][5]int{}
	var total [5]int
	inLedger := map[string]bool{}
	for _, c := range dynamoLedger {
		assert.True(t, 0 <= c.dflt && c.dflt <= c.mirrored && c.compat <= c.mirrored && c.mirrored <= c.asserts, "%s: figures out of order", c.test)
		assert.Equal(t, c.mirror != "", c.mirrored > 0, "%s: a mirror if and only if mirrored assertions", c.test)
		if c.mirror != "" {
			doc, ok := docs[c.mirror]
			if assert.True(t, ok, "%s: mirror %s exists", c.test, c.mirror) {
				assert.Contains(t, doc, c.test, "%s names the test it mirrors", c.mirror)
			}
			inLedger[c.mirror] = true
		}
		if c.compat < c.mirrored {
			assert.True(t, strings.Contains(section, "`"+c.test+"`"), "§13 lists the difference left in %s", c.test)
		}
		for i, v := range [5]int{1, c.asserts, c.mirrored, c.dflt, c.compat} {
			s := sums[c.area]
			s[i] += v
			sums[c.area] = s
			total[i] += v
		}
	}
	for area, s := range sums {
		assert.Equal(t, s, table[area], "§13's row for %s", area)
	}
	assert.Equal(t, total, table["all"], "§13's total row")
	for test, mirror := range dynamoUncounted {
		doc, ok := docs[mirror]
		if assert.True(t, ok, "mirror %s exists", mirror) {
			assert.Contains(t, doc, strings.Fields(test)[0], "%s names the test it mirrors", mirror)
		}
		assert.True(t, strings.Contains(section, "`"+strings.Fields(test)[0]+"`"), "§13 names %s", test)
		inLedger[mirror] = true
	}
	for mirror := range docs {
		assert.True(t, inLedger[mirror], "%s is in the ledger or in dynamoUncounted", mirror)
	}
}
