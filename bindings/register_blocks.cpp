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
      .def(py::init<const KvCacheConfig&>(), py::arg("config"))
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
