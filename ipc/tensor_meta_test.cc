#include "ipc/tensor_meta.h"

#include "gtest/gtest.h"

namespace shoal {
namespace {

TEST(TensorMetaTest, ContiguousSizes) {
  TensorMeta m = TensorMeta::Contiguous(DType::kF32, {2, 3, 4});
  EXPECT_EQ(m.NumElements(), 24);
  EXPECT_EQ(m.NumBytes(), 96);
  EXPECT_EQ(m.EffectiveStrides(), (Dims{12, 4, 1}));
  EXPECT_TRUE(m.IsContiguous());
  EXPECT_TRUE(m.Validate().ok());
  EXPECT_EQ(m.ToString(), "f32[2,3,4] cpu");
}

TEST(TensorMetaTest, StridedSpan) {
  // A transposed 3x4 view of a 4x3 f64 matrix: spans the full 12 elements.
  TensorMeta m = TensorMeta::Contiguous(DType::kF64, {3, 4});
  m.strides = {1, 3};
  EXPECT_FALSE(m.IsContiguous());
  EXPECT_EQ(m.NumBytes(), 12 * 8);
  EXPECT_TRUE(m.Validate().ok());
}

TEST(TensorMetaTest, EmptyAndScalar) {
  EXPECT_EQ(TensorMeta::Contiguous(DType::kI64, {0, 5}).NumBytes(), 0);
  EXPECT_EQ(TensorMeta::Contiguous(DType::kI64, {}).NumBytes(), 8);
  EXPECT_EQ(TensorMeta::Bytes(100).NumBytes(), 100);
}

TEST(TensorMetaTest, ValidateRejects) {
  TensorMeta m = TensorMeta::Contiguous(DType::kF32, Dims(9, 1));
  EXPECT_EQ(m.Validate().code(), absl::StatusCode::kInvalidArgument);
  m = TensorMeta::Contiguous(DType::kF32, {2, -1});
  EXPECT_EQ(m.Validate().code(), absl::StatusCode::kInvalidArgument);
  m = TensorMeta::Contiguous(DType::kF32, {int64_t{1} << 40, int64_t{1} << 40});
  EXPECT_EQ(m.Validate().code(), absl::StatusCode::kInvalidArgument);
  m = TensorMeta::Contiguous(DType::kF32, {2, 2});
  m.strides = {1};
  EXPECT_EQ(m.Validate().code(), absl::StatusCode::kInvalidArgument);
  m.strides = {int64_t{1} << 61, 1};
  EXPECT_EQ(m.Validate().code(), absl::StatusCode::kInvalidArgument);
  m = TensorMeta::Contiguous(static_cast<DType>(42), {1});
  EXPECT_EQ(m.Validate().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorMetaTest, ParseNames) {
  EXPECT_EQ(*ParseDType("float32"), DType::kF32);
  EXPECT_EQ(*ParseDType("BF16"), DType::kBF16);
  EXPECT_FALSE(ParseDType("complex64").ok());
  for (int i = 0; i < kNumDTypes; ++i) {
    DType t = static_cast<DType>(i);
    EXPECT_EQ(*ParseDType(DTypeName(t)), t);
  }
  EXPECT_EQ(ParseDevice("cuda:3")->index, 3);
  EXPECT_TRUE(ParseDevice("cpu")->is_cpu());
  EXPECT_FALSE(ParseDevice("tpu").ok());
  EXPECT_FALSE(ParseDevice("cuda:-1").ok());
}

}  // namespace
}  // namespace shoal
