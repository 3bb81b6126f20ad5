#include "collectives/shm_test_support.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "collectives/in_memory_rendezvous.h"
#include "collectives/reduce_kernels.h"

namespace shoal::collectives::testing {

ShmCommOptions SmallSlots() {
  ShmCommOptions o;
  o.slot_bytes = 4096;
  o.p2p_bytes = 4096;
  o.one_step_bytes = 1024;
  o.stream_bytes = 6144;
  o.timeout = absl::Seconds(30);
  return o;
}

std::vector<absl::Status> RunRanks(
    int world, const ShmCommOptions& options,
    const std::function<void(ShmCommunicator&)>& body,
    const std::vector<int>& skip_create) {
  // Segment names include the pid: within one process the name must differ
  // per communicator (a live owner's segment cannot be created twice).
  static std::atomic<int> next{0};
  const std::string name = absl::StrCat("t", next.fetch_add(1));
  InMemoryRendezvous rendezvous;
  std::vector<absl::Status> created(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    if (std::find(skip_create.begin(), skip_create.end(), r) !=
        skip_create.end()) {
      continue;
    }
    threads.emplace_back([&, r] {
      auto comm = ShmCommunicator::Create(rendezvous, "inproc", name, r, world,
                                          options);
      created[r] = comm.status();
      if (comm.ok()) body(**comm);
    });
  }
  for (std::thread& t : threads) t.join();
  return created;
}

double Value(int rank, int64_t i, ReduceOp op) {
  if (op == ReduceOp::kProd) {
    const int64_t v = ((rank + i) % 3) - 1;
    return static_cast<double>(v == 0 ? 2 : v);
  }
  return static_cast<double>(((rank * 7 + i * 3) % 13) - 6);
}

void StoreElement(DType t, void* base, int64_t i, double v) {
  auto* p = static_cast<uint8_t*>(base) + i * DTypeSize(t);
  auto put = [p](auto x) { std::memcpy(p, &x, sizeof(x)); };
  switch (t) {
    case DType::kF32:
      put(static_cast<float>(v));
      break;
    case DType::kF64:
      put(v);
      break;
    case DType::kI32:
      put(static_cast<int32_t>(v));
      break;
    case DType::kI64:
      put(static_cast<int64_t>(v));
      break;
    case DType::kF16:
      put(FloatToHalf(static_cast<float>(v)));
      break;
    case DType::kBF16:
      put(FloatToBF16(static_cast<float>(v)));
      break;
    default:
      break;
  }
}

double LoadElement(DType t, const void* base, int64_t i) {
  const auto* p = static_cast<const uint8_t*>(base) + i * DTypeSize(t);
  auto get = [p](auto x) {
    std::memcpy(&x, p, sizeof(x));
    return x;
  };
  switch (t) {
    case DType::kF32:
      return get(float{});
    case DType::kF64:
      return get(double{});
    case DType::kI32:
      return get(int32_t{});
    case DType::kI64:
      return static_cast<double>(get(int64_t{}));
    case DType::kF16:
      return HalfToFloat(get(uint16_t{}));
    case DType::kBF16:
      return BF16ToFloat(get(uint16_t{}));
    default:
      return 0;
  }
}

double Expected(DType t, ReduceOp op, int world, int64_t i) {
  double acc = Value(0, i, op);
  for (int r = 1; r < world; ++r) {
    const double v = Value(r, i, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += v;
        break;
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  if (op != ReduceOp::kAvg) return acc;
  // The kernels' avg: ints truncate; f16/bf16 divide in f32 and round once.
  if (t == DType::kI32 || t == DType::kI64) return std::trunc(acc / world);
  const double quotient = t == DType::kF64
                              ? acc / world
                              : static_cast<double>(static_cast<float>(acc) /
                                                    static_cast<float>(world));
  uint8_t tmp[8];
  StoreElement(t, tmp, 0, quotient);
  return LoadElement(t, tmp, 0);
}

std::vector<uint8_t> Fill(DType t, int rank, int64_t count, ReduceOp op,
                          int64_t shift, int64_t spare) {
  std::vector<uint8_t> b(count * DTypeSize(t) + spare, 0xee);
  for (int64_t i = 0; i < count; ++i) {
    StoreElement(t, b.data(), i, Value(rank, i + shift, op));
  }
  return b;
}

std::vector<uint8_t> Pattern(int rank, int block, int64_t bytes) {
  std::vector<uint8_t> b(bytes);
  for (int64_t j = 0; j < bytes; ++j) {
    b[j] = static_cast<uint8_t>(rank * 61 + block * 17 + j * 7 + j / 256);
  }
  return b;
}

std::vector<int64_t> Counts(DType t) {
  const ShmCommOptions o = SmallSlots();
  const int64_t e = static_cast<int64_t>(DTypeSize(t));
  const int64_t one_step = static_cast<int64_t>(o.one_step_bytes) / e;
  const int64_t slot = static_cast<int64_t>(o.slot_bytes) / e;
  return {0, 1, 7, one_step, one_step + 1, slot, slot + 1, 2 * slot + 3};
}

std::string CheckReduced(DType t, ReduceOp op, int world,
                         const std::vector<uint8_t>& out, int64_t count,
                         int64_t shift) {
  for (int64_t i = 0; i < count; ++i) {
    const double got = LoadElement(t, out.data(), i);
    const double want = Expected(t, op, world, i + shift);
    if (got != want) {
      return absl::StrCat("[", i, "] got ", got, " want ", want);
    }
  }
  return "";
}

}  // namespace shoal::collectives::testing
