#include "ipc/task_payload.h"

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "ipc/object_id.h"
#include "ipc/protocol_test_util.h"
#include "ipc/tensor_meta.h"
#include "ipc/value.h"

namespace shoal::ipc {
namespace {

using protocol_test::ExpectSameValues;
using protocol_test::MutateBytes;
using protocol_test::Pattern;
using protocol_test::Strided;
using protocol_test::Tensor;

std::vector<Value> EveryKindOfValue() {
  std::vector<Value> v;
  v.push_back(std::monostate{});
  v.push_back(true);
  v.push_back(false);
  v.push_back(int64_t{0});
  v.push_back(std::numeric_limits<int64_t>::min());
  v.push_back(std::numeric_limits<int64_t>::max());
  v.push_back(-1.5);
  v.push_back(-0.0);
  v.push_back(std::numeric_limits<double>::quiet_NaN());
  v.push_back(-std::numeric_limits<double>::infinity());
  v.push_back(std::string());
  v.push_back(std::string("text \xe2\x9c\x93"));
  v.push_back(BytesValue{});
  v.push_back(BytesValue{std::string("\0\x01\xfe\xff", 4)});
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kF32, {2, 3})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kBF16, {4})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kI64, {})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kU8, {0})));
  v.push_back(Tensor(TensorMeta::Contiguous(DType::kBool, {2, 2, 2})));
  v.push_back(Tensor(TensorMeta::Bytes(5)));
  v.push_back(Tensor(Strided(DType::kF64, {3, 2}, {1, 3})));
  v.push_back(Tensor(Strided(DType::kI32, {2, 2}, {4, 1})));
  ObjectValue o;
  o.id = ObjectId::Random();
  o.meta = TensorMeta::Contiguous(DType::kF16, {256, 512});
  o.nbytes = 256 * 512 * 2;
  v.push_back(o);
  ObjectValue g;
  g.id = ObjectId::Random();
  g.meta = Strided(DType::kF32, {4, 4}, {1, 4});
  g.meta.device = Device::Cuda(1);
  g.nbytes = 64;
  v.push_back(g);
  return v;
}

// A tiny protobuf writer, to build payloads the encoders never produce.
std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>(0x80 | (v & 0x7f)));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
std::string LenField(int field, const std::string& body) {
  return Varint((static_cast<uint64_t>(field) << 3) | 2) + Varint(body.size()) +
         body;
}
std::string VarintField(int field, uint64_t v) {
  return Varint(static_cast<uint64_t>(field) << 3) + Varint(v);
}
// wire::Value { object: ObjectValue { id, meta: f32[4], nbytes: 16 } }.
std::string ObjectValueBytes(const std::string& id) {
  std::string meta =
      VarintField(1, static_cast<uint64_t>(DType::kF32)) + VarintField(2, 4);
  std::string obj = LenField(1, id) + LenField(2, meta) + VarintField(3, 16);
  return LenField(7, obj);
}

// ---- args
// --------------------------------------------------------------------

TEST(TaskPayloadTest, ArgsRoundTripEveryKind) {
  const std::vector<Value> args = EveryKindOfValue();
  std::string bytes = EncodeTaskArgs(args);
  EXPECT_FALSE(bytes.empty());
  auto got = DecodeTaskArgs(bytes);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSameValues(args, *got);
}

TEST(TaskPayloadTest, ArgsRoundTripOneByOne) {
  for (const Value& v : EveryKindOfValue()) {
    SCOPED_TRACE(ValueToString(v));
    std::vector<Value> args = {v};
    auto got = DecodeTaskArgs(EncodeTaskArgs(args));
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectSameValues(args, *got);
  }
}

TEST(TaskPayloadTest, NoArgsAreEmptyBytes) {
  EXPECT_EQ(EncodeTaskArgs({}), "");
  auto got = DecodeTaskArgs("");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->empty());
  // One "none" argument is not the same as no arguments.
  std::vector<Value> one_none = {std::monostate{}};
  std::string bytes = EncodeTaskArgs(one_none);
  EXPECT_FALSE(bytes.empty());
  auto back = DecodeTaskArgs(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_TRUE(std::holds_alternative<std::monostate>((*back)[0]));
}

TEST(TaskPayloadTest, ManyArgsRoundTrip) {
  std::vector<Value> args;
  for (int64_t i = 0; i < 5000; ++i) args.push_back(i * 7919 - 100000);
  auto got = DecodeTaskArgs(EncodeTaskArgs(args));
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSameValues(args, *got);
}

TEST(TaskPayloadTest, LargestInlineTensorRoundTrips) {
  std::vector<Value> args = {Tensor(TensorMeta::Contiguous(
      DType::kF32, {static_cast<int64_t>(kInlineValueLimit / 4)}))};
  auto got = DecodeTaskArgs(EncodeTaskArgs(args));
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSameValues(args, *got);
}

TEST(TaskPayloadTest, PythonPathRoundTrips) {
  const std::vector<Value> args = {int64_t{3}};
  auto got = DecodeTaskArgsBody(EncodeTaskArgs(args, "/a/b:/c"));
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSameValues(args, got->args);
  EXPECT_EQ(got->python_path, "/a/b:/c");
  // A path alone (no arguments) is not dropped.
  auto alone = DecodeTaskArgsBody(EncodeTaskArgs({}, "/x"));
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_TRUE(alone->args.empty());
  EXPECT_EQ(alone->python_path, "/x");
  // Readers that want only the values still get them.
  auto values = DecodeTaskArgs(EncodeTaskArgs(args, "/a"));
  ASSERT_TRUE(values.ok()) << values.status();
  ExpectSameValues(args, *values);
}

// No argument or one bytes argument (a Python task's pickled call) takes the
// compact form; with any path, and round-trips.
TEST(TaskPayloadTest, CompactArgsRoundTrip) {
  const std::string pickled("\x80\x05\0N}\x87.", 7);
  for (const std::string& path :
       {std::string(), std::string("@0123abcd"), std::string(70000, 'p')}) {
    for (bool one : {false, true}) {
      std::vector<Value> args;
      if (one) args.push_back(BytesValue{pickled});
      const std::string bytes = EncodeTaskArgs(args, path);
      if (!one && path.empty()) {
        EXPECT_EQ(bytes, "");
        continue;
      }
      ASSERT_GE(bytes.size(), 6u);
      EXPECT_EQ(bytes[0], '\0');
      auto got = DecodeTaskArgsBody(bytes);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->python_path, path);
      ExpectSameValues(args, got->args);
    }
  }
  // Anything else: the schema's message.
  EXPECT_NE(EncodeTaskArgs({int64_t{1}}, "p")[0], '\0');
  EXPECT_NE(EncodeTaskArgs({BytesValue{"a"}, BytesValue{"b"}}, "")[0], '\0');
}

TEST(TaskPayloadTest, MalformedCompactArgsAreInvalidArgument) {
  const std::string z(1, '\0');
  const std::string len3("\x03\0\0\0", 4);
  for (const std::string& bad :
       {z, z + "n", z + "n\x01\0\0", z + "q" + len3 + "abc",
        z + "n" + len3 + "ab", z + "n" + len3 + "abcd", z + "y" + len3 + "ab",
        z + "y" + std::string("\xff\xff\xff\xff", 4) + "x"}) {
    EXPECT_EQ(DecodeTaskArgsBody(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << absl::CHexEscape(bad);
  }
  auto ok = DecodeTaskArgsBody(z + "y" + len3 + "abc");  // an empty argument
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->python_path, "abc");
  ExpectSameValues({BytesValue{}}, ok->args);
}

// ---- outcome
// -----------------------------------------------------------------

TEST(TaskPayloadTest, EmptyOutcomeIsEmptyBytes) {
  EXPECT_EQ(EncodeTaskOutcome("", {}), "");
  auto got = DecodeTaskOutcome("");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->message, "");
  EXPECT_TRUE(got->outputs.empty());
}

TEST(TaskPayloadTest, OutcomeMessageOnly) {
  std::string bytes = EncodeTaskOutcome("division by zero in task 'div'", {});
  EXPECT_FALSE(bytes.empty());
  auto got = DecodeTaskOutcome(bytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->message, "division by zero in task 'div'");
  EXPECT_TRUE(got->outputs.empty());
}

TEST(TaskPayloadTest, OutcomeOutputsOnly) {
  const std::vector<Value> outputs = EveryKindOfValue();
  auto got = DecodeTaskOutcome(EncodeTaskOutcome("", outputs));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->message, "");
  ExpectSameValues(outputs, got->outputs);

  // A single "none" output still counts as an output.
  std::vector<Value> one_none = {std::monostate{}};
  std::string bytes = EncodeTaskOutcome("", one_none);
  EXPECT_FALSE(bytes.empty());
  auto back = DecodeTaskOutcome(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->outputs.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(back->outputs[0]));
}

// Every kind of value as the one output: scalars take the compact form
// (a 0x00 byte, no protobuf), the rest the schema's message; all round-trip.
TEST(TaskPayloadTest, OneOutputOfEveryKindRoundTrips) {
  for (const Value& v : EveryKindOfValue()) {
    const std::vector<Value> one = {v};
    const std::string bytes = EncodeTaskOutcome("", one);
    const bool scalar = std::holds_alternative<int64_t>(v) ||
                        std::holds_alternative<double>(v) ||
                        std::holds_alternative<bool>(v) ||
                        std::holds_alternative<std::string>(v) ||
                        std::holds_alternative<BytesValue>(v);
    ASSERT_FALSE(bytes.empty());
    EXPECT_EQ(bytes[0] == '\0', scalar) << ValueToString(v);
    auto got = DecodeTaskOutcome(bytes);
    ASSERT_TRUE(got.ok()) << got.status() << " " << ValueToString(v);
    EXPECT_EQ(got->message, "");
    EXPECT_FALSE(got->exception.has_value());
    ExpectSameValues(one, got->outputs);
  }
  // A message or an exception beside the scalar: the full message.
  const std::vector<Value> one = {int64_t{7}};
  EXPECT_NE(EncodeTaskOutcome("m", one)[0], '\0');
  EXPECT_NE(EncodeTaskOutcome("", one, TaskException{"t", "m", "", ""})[0],
            '\0');
}

TEST(TaskPayloadTest, MalformedCompactOutcomesAreInvalidArgument) {
  const std::string z(1, '\0');
  for (const std::string& bad :
       {z, z + "i", z + "i1234567", z + "i123456789", z + "f", z + "b",
        z + "b\x02", z + std::string("b\x01\x00", 3), z + "q", z + z}) {
    EXPECT_EQ(DecodeTaskOutcome(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << absl::CHexEscape(bad);
  }
  auto empty_text = DecodeTaskOutcome(z + "s");
  ASSERT_TRUE(empty_text.ok());
  ExpectSameValues({std::string()}, empty_text->outputs);
}

TEST(TaskPayloadTest, OutcomeMessageAndOutputs) {
  const std::vector<Value> outputs = {int64_t{5}, std::string("five"),
                                      BytesValue{"\x05"}};
  const std::string message(3000, 'm');
  auto got = DecodeTaskOutcome(EncodeTaskOutcome(message, outputs));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->message, message);
  ExpectSameValues(outputs, got->outputs);
}

// A Python exception's fields come back as they went, whatever they hold —
// a message that looks like a traceback included.
TEST(TaskPayloadTest, OutcomeExceptionRoundTripsAsFields) {
  const TaskException e{
      "mymod.MyError",
      "first line\nTraceback (most recent call last):\n  not a frame",
      "Traceback (most recent call last):\n  File \"m.py\", line 1\n"
      "mymod.MyError: first line\n",
      std::string("\x80\x05\0any bytes", 12)};
  auto got = DecodeTaskOutcome(EncodeTaskOutcome("the status message", {}, e));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->message, "the status message");
  ASSERT_TRUE(got->exception.has_value());
  EXPECT_EQ(*got->exception, e);

  // Absent when not given (C++ tasks), and an empty one is still present.
  auto none = DecodeTaskOutcome(EncodeTaskOutcome("failed", {}));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->exception.has_value());
  auto empty = DecodeTaskOutcome(EncodeTaskOutcome("", {}, TaskException{}));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->exception.has_value());
}

TEST(TaskPayloadTest, ExceptionRidesOnAStatusPayload) {
  const TaskException e{"builtins.ValueError", "bad\nvalue", "tb\n"};
  absl::Status s = WithTaskException(absl::UnknownError("text"), e);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(s.message(), "text");
  std::optional<TaskException> got = TaskExceptionOf(s);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, e);
  EXPECT_FALSE(TaskExceptionOf(absl::UnknownError("text")).has_value());
  EXPECT_FALSE(TaskExceptionOf(absl::OkStatus()).has_value());
}

// ---- bad input
// ---------------------------------------------------------------

TEST(TaskPayloadTest, GarbageIsInvalidArgument) {
  for (const std::string& bad : {
           std::string("\xff\xff\xff\xff garbage"),
           std::string("\x0a\x05\x08"),  // a field longer than the input
           std::string("\x0a"),          // a tag without its length
           std::string("\x07"),          // field 0
           std::string(12, '\xff'),      // an overlong varint
       }) {
    SCOPED_TRACE(testing::PrintToString(bad));
    EXPECT_EQ(DecodeTaskArgs(bad).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(DecodeTaskOutcome(bad).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(TaskPayloadTest, BadValuesAreInvalidArgument) {
  // An inline tensor whose data does not match its metadata.
  TensorValue t = Tensor(TensorMeta::Contiguous(DType::kF32, {3}));
  t.data.pop_back();
  std::vector<Value> args = {int64_t{1}, t};
  EXPECT_EQ(DecodeTaskArgs(EncodeTaskArgs(args)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeTaskOutcome(EncodeTaskOutcome("m", args)).status().code(),
            absl::StatusCode::kInvalidArgument);

  // An inline tensor with invalid metadata (a negative dimension).
  TensorValue neg;
  neg.meta = TensorMeta::Contiguous(DType::kF32, {-1});
  args = {neg};
  EXPECT_EQ(DecodeTaskArgs(EncodeTaskArgs(args)).status().code(),
            absl::StatusCode::kInvalidArgument);

  // Object ids that are not 16 bytes.
  for (size_t n : {size_t{0}, size_t{15}, size_t{17}}) {
    SCOPED_TRACE(n);
    const std::string value = ObjectValueBytes(std::string(n, 'i'));
    EXPECT_EQ(DecodeTaskArgs(LenField(1, value)).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(DecodeTaskOutcome(LenField(2, value)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  // The hand-built encoding itself is right: 16 bytes decode.
  auto ok = DecodeTaskArgs(LenField(1, ObjectValueBytes(std::string(16, 'i'))));
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->size(), 1u);
  const auto& obj = std::get<ObjectValue>((*ok)[0]);
  EXPECT_EQ(obj.id.Binary(), std::string(16, 'i'));
  EXPECT_EQ(obj.meta, TensorMeta::Contiguous(DType::kF32, {4}));
  EXPECT_EQ(obj.nbytes, 16u);
}

TEST(TaskPayloadTest, UnknownFieldsAreIgnored) {
  // A newer peer's extra field (number 15) next to a known argument.
  std::string bytes = EncodeTaskArgs({Value(int64_t{9})}) + VarintField(15, 1);
  auto got = DecodeTaskArgs(bytes);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ(std::get<int64_t>((*got)[0]), 9);
}

// ---- fuzz
// --------------------------------------------------------------------

// Decoded values must encode and decode again to the same values.
void ExpectStable(const std::vector<Value>& values) {
  auto again = DecodeTaskArgs(EncodeTaskArgs(values));
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectSameValues(values, *again);
}

TEST(TaskPayloadTest, RandomBytesNeverCrash) {
  std::mt19937_64 rng(2024);
  int args_ok = 0, outcome_ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string bytes(rng() % 256, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    auto args = DecodeTaskArgs(bytes);
    if (args.ok()) {
      ++args_ok;
      ExpectStable(*args);
    } else {
      EXPECT_EQ(args.status().code(), absl::StatusCode::kInvalidArgument);
    }
    auto outcome = DecodeTaskOutcome(bytes);
    if (outcome.ok()) {
      ++outcome_ok;
      ExpectStable(outcome->outputs);
    } else {
      EXPECT_EQ(outcome.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  // Empty input at least decodes.
  EXPECT_GT(args_ok, 0);
  EXPECT_GT(outcome_ok, 0);
}

TEST(TaskPayloadTest, MutatedPayloadsNeverCrash) {
  // Mutations of real payloads reach the value validation far more often
  // than uniformly random bytes do.
  const std::vector<Value> values = EveryKindOfValue();
  const std::vector<std::string> seeds = {
      EncodeTaskArgs(values), EncodeTaskOutcome("some error", values),
      EncodeTaskOutcome(
          "", {Value(Tensor(TensorMeta::Contiguous(DType::kF32, {2, 2})))}),
      EncodeTaskArgs({Value(Tensor(Strided(DType::kI16, {3, 3}, {1, 3})))})};
  std::mt19937_64 rng(99);
  int decoded = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string bytes = seeds[rng() % seeds.size()];
    MutateBytes(rng, &bytes);
    auto args = DecodeTaskArgs(bytes);
    if (args.ok()) {
      ++decoded;
      ExpectStable(*args);
    }
    auto outcome = DecodeTaskOutcome(bytes);
    if (outcome.ok()) {
      ++decoded;
      ExpectStable(outcome->outputs);
    }
  }
  EXPECT_GT(decoded, 0);
}

}  // namespace
}  // namespace shoal::ipc

namespace shoal::ipc {
namespace {

// Text values need not be UTF-8 (the schema declares them bytes).
TEST(TaskPayloadBinaryText, NonUtf8StringsRoundTrip) {
  const std::string binary("\xff\xfe\x00\x80 text", 9);
  std::vector<Value> args = {Value(binary)};
  auto back = DecodeTaskArgs(EncodeTaskArgs(args));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(std::get<std::string>((*back)[0]), binary);
  auto outcome = DecodeTaskOutcome(EncodeTaskOutcome(binary, {}));
  ASSERT_TRUE(outcome.ok());
  EXPECT_EQ(outcome->message, binary);
}

}  // namespace
}  // namespace shoal::ipc
