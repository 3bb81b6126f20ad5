#include "ipc/protocol_test_util.h"

#include <cstring>
#include <limits>
#include <utility>

namespace shoal::ipc::protocol_test {

bool SameValue(const Value& a, const Value& b) {
  if (a.index() != b.index()) return false;
  if (const auto* x = std::get_if<double>(&a)) {
    const double y = std::get<double>(b);
    return std::memcmp(x, &y, sizeof(double)) == 0;
  }
  if (const auto* x = std::get_if<BytesValue>(&a)) {
    return x->data == std::get<BytesValue>(b).data;
  }
  if (const auto* x = std::get_if<TensorValue>(&a)) {
    const auto& y = std::get<TensorValue>(b);
    return x->meta == y.meta && x->meta.strides == y.meta.strides &&
           x->data == y.data;
  }
  if (const auto* x = std::get_if<ObjectValue>(&a)) {
    const auto& y = std::get<ObjectValue>(b);
    return x->id == y.id && x->meta == y.meta && x->nbytes == y.nbytes;
  }
  if (std::holds_alternative<std::monostate>(a)) return true;
  if (const auto* x = std::get_if<bool>(&a)) return *x == std::get<bool>(b);
  if (const auto* x = std::get_if<int64_t>(&a)) {
    return *x == std::get<int64_t>(b);
  }
  return std::get<std::string>(a) == std::get<std::string>(b);
}

void ExpectSameValues(const std::vector<Value>& want,
                      const std::vector<Value>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(SameValue(want[i], got[i]))
        << "value " << i << ": want " << ValueKindName(want[i]) << " "
        << ValueToString(want[i]) << ", got " << ValueKindName(got[i]) << " "
        << ValueToString(got[i]);
  }
}

std::string Pattern(size_t nbytes, uint8_t seed) {
  std::string s(nbytes, '\0');
  for (size_t i = 0; i < nbytes; ++i) s[i] = static_cast<char>(seed + i * 7);
  return s;
}

TensorValue Tensor(TensorMeta meta) {
  TensorValue t;
  t.data = Pattern(static_cast<size_t>(meta.NumBytes()),
                   static_cast<uint8_t>(meta.dtype));
  t.meta = std::move(meta);
  return t;
}

TensorMeta Strided(DType dtype, Dims shape, Dims strides) {
  TensorMeta m = TensorMeta::Contiguous(dtype, std::move(shape));
  m.strides = std::move(strides);
  return m;
}

std::vector<Value> EveryKindOfValue() {
  std::vector<Value> v;
  v.push_back(std::monostate{});
  v.push_back(true);
  v.push_back(false);
  v.push_back(int64_t{0});
  v.push_back(int64_t{-42});
  v.push_back(std::numeric_limits<int64_t>::min());
  v.push_back(std::numeric_limits<int64_t>::max());
  v.push_back(2.5);
  v.push_back(-0.0);
  v.push_back(std::numeric_limits<double>::infinity());
  v.push_back(std::numeric_limits<double>::quiet_NaN());
  v.push_back(std::numeric_limits<double>::denorm_min());
  v.push_back(std::string());
  v.push_back(std::string("hello, world"));
  v.push_back(std::string("caf\xc3\xa9 \xe2\x9c\x93"));  // UTF-8
  v.push_back(BytesValue{});
  v.push_back(BytesValue{std::string("\0\xff\x80raw\0", 7)});
  // Inline tensors: several dtypes and ranks, empty ones, strided ones.
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kF32, {2, 3})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kF64, {4})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kBF16, {1, 2, 3, 4})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kF16, {5, 1})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kI8, {3})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kI16, {2, 2})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kI32, {7})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kI64, {2, 1, 2})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kU8, {16})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kBool, {3, 3})));
  v.push_back(Tensor(TensorMeta::Bytes(11)));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kF32, {})));      // scalar
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kF32, {0, 5})));  // empty
  v.push_back(Tensor(TensorMeta::Contiguous(
      DType::kF32, {1, 1, 1, 1, 1, 1, 1, 2})));  // rank kMaxRank
  // A transposed 3x4 (strides 1,3) and a row-skipping view (every other row).
  v.push_back(Tensor(Strided(DType::kF32, {4, 3}, {1, 4})));
  v.push_back(Tensor(Strided(DType::kI64, {2, 3}, {6, 1})));
  v.push_back(Tensor(Strided(DType::kF64, {3, 2}, {0, 1})));  // broadcast
  // Store references.
  ObjectValue o;
  o.id = ObjectId::Random();
  o.meta = TensorMeta::Contiguous(DType::kF32, {1024, 1024});
  o.nbytes = 4u << 20;
  v.push_back(o);
  ObjectValue strided_obj;
  strided_obj.id = ObjectId::Random();
  strided_obj.meta = Strided(DType::kBF16, {8, 8}, {1, 8});
  strided_obj.meta.device = Device::Cuda(3);
  strided_obj.nbytes = 128;
  v.push_back(strided_obj);
  v.push_back(ObjectValue{});  // the nil id, raw meta
  return v;
}

void MutateBytes(std::mt19937_64& rng, std::string* bytes) {
  const int edits = 1 + rng() % 4;
  for (int e = 0; e < edits && !bytes->empty(); ++e) {
    const size_t at = rng() % bytes->size();
    switch (rng() % 3) {
      case 0:
        (*bytes)[at] = static_cast<char>(rng());
        break;
      case 1:
        bytes->erase(at, 1 + rng() % 4);
        break;
      default:
        bytes->insert(at, 1, static_cast<char>(rng()));
    }
  }
}

absl::StatusCode DecodeCode(wire::Envelope w, const DecodeLimits& limits) {
  w.set_major(kProtocolMajor);
  return Decode(w.SerializeAsString(), limits).envelope.status().code();
}

absl::StatusCode EncodeDecodeCode(const Message& body,
                                  const DecodeLimits& limits) {
  auto frame = Encode(3, body);
  EXPECT_TRUE(frame.ok()) << frame.status();
  if (!frame.ok()) return absl::StatusCode::kUnknown;
  DecodeResult r = Decode(*frame, limits);
  EXPECT_EQ(r.request_id, 3u);
  return r.envelope.status().code();
}

}  // namespace shoal::ipc::protocol_test
