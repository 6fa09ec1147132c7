// Block pool accounting and per-group block tables (KvCacheManager).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "kv/blocks.h"

namespace py = pybind11;
using namespace specdec::kv;

void register_blocks(py::module_& m) {
  py::class_<AllocationResult>(m, "AllocationResult",
                               "Outcome of allocate_slots: ok, or which group was short and by how much.")
      .def_readonly("ok", &AllocationResult::ok)
      .def_readonly("group_id", &AllocationResult::group_id)
      .def_readonly("blocks_needed", &AllocationResult::blocks_needed)
      .def_readonly("blocks_free", &AllocationResult::blocks_free)
      .def("__bool__", [](const AllocationResult& r) { return r.ok; })
      .def("__repr__", &AllocationResult::to_string);

  py::class_<KvCacheManager>(m, "KvCacheManager",
                             "Block tables of every request over every KV-cache group of a plan.")
      .def(py::init<const KvCacheConfig&, bool>(), py::arg("config"), py::arg("enable_prefix_caching") = false)
      .def("claim_prefix", [](KvCacheManager& m, const std::string& rid, const std::vector<int32_t>& tokens,
                              int64_t max_tokens) { return m.claim_prefix(rid, tokens, max_tokens); },
           py::arg("request_id"), py::arg("tokens"), py::arg("max_tokens"),
           "A new request starts from the longest cached prefix of tokens (whole blocks, at most "
           "max_tokens and len - 1); returns its length (0: nothing created).")
      .def("record_tokens", [](KvCacheManager& m, const std::string& rid, int64_t num_computed,
                               const std::vector<int32_t>& tokens, int64_t committed) {
             m.record_tokens(rid, num_computed, tokens, committed);
           }, py::arg("request_id"), py::arg("num_computed_tokens"), py::arg("tokens"), py::arg("num_committed_tokens"),
           "A step wrote tokens after num_computed_tokens; full blocks below num_committed_tokens are cached.")
      .def("reset_prefix_cache", &KvCacheManager::reset_prefix_cache)
      .def_property_readonly("prefix_caching", &KvCacheManager::prefix_caching)
      .def_property_readonly("prefix_cache_queries", &KvCacheManager::prefix_cache_queries)
      .def_property_readonly("prefix_cache_hits", &KvCacheManager::prefix_cache_hits)
      .def("num_cached_blocks", &KvCacheManager::num_cached_blocks, py::arg("group_id"))
      .def("allocate_slots", &KvCacheManager::allocate_slots, py::arg("request_id"),
           py::arg("num_computed_tokens"), py::arg("num_new_tokens"), py::arg("num_committed_tokens") = -1,
           "Frees blocks that left a window or chunk (as seen from num_committed_tokens, -1: "
           "num_computed_tokens), then covers num_computed_tokens + "
           "num_new_tokens tokens in every group. All or nothing; out of blocks is a result "
           "(ok=False), not an exception.")
      .def("num_blocks_needed", &KvCacheManager::num_blocks_needed, py::arg("request_id"),
           py::arg("num_computed_tokens"), py::arg("num_new_tokens"), py::arg("group_id"),
           py::arg("num_committed_tokens") = -1)
      .def("can_allocate", &KvCacheManager::can_allocate, py::arg("request_id"),
           py::arg("num_computed_tokens"), py::arg("num_new_tokens"))
      .def("truncate", &KvCacheManager::truncate, py::arg("request_id"), py::arg("num_tokens"),
           "Speculative rollback to num_tokens tokens; surplus blocks return to the pool.")
      .def("free", &KvCacheManager::free, py::arg("request_id"), "Request end: returns all its blocks.")
      .def("block_table", &KvCacheManager::block_table, py::arg("request_id"), py::arg("group_id"))
      .def("num_freed_blocks", &KvCacheManager::num_freed_blocks, py::arg("request_id"), py::arg("group_id"))
      .def("num_slot_tokens", &KvCacheManager::num_slot_tokens, py::arg("request_id"))
      .def("num_free_blocks", &KvCacheManager::num_free_blocks, py::arg("group_id"))
      .def("capacity", &KvCacheManager::capacity, py::arg("group_id"))
      .def_property_readonly("usage", &KvCacheManager::usage)
      .def_property_readonly("num_requests", &KvCacheManager::num_requests)
      .def_property_readonly("num_groups", &KvCacheManager::num_groups)
      .def("has_request", &KvCacheManager::has_request, py::arg("request_id"));
}
