// Unit tests of the multi-shape check's merge of variant verdicts and its JSON round trip.
#include <gtest/gtest.h>

#include "kernelllm/harness/verify.h"
#include "harness/verifier.h"

namespace kernelllm::harness {
namespace {

ShapeVariantResult variant(const char* name, Verdict v) {
  ShapeVariantResult r;
  r.name = name;
  r.verdict = v;
  return r;
}

TEST(MultishapeMerge, AllCorrectPasses) {
  auto m = merge_variant_verdicts({variant("half", Verdict::correct), variant("odd", Verdict::correct)});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(*m, ShapeVerdict::pass);
}

TEST(MultishapeMerge, AnyFailureFails) {
  for (Verdict bad : {Verdict::wrong_output, Verdict::wrong_shape, Verdict::runtime_error, Verdict::crash, Verdict::timeout,
                      Verdict::cheat, Verdict::compile_error, Verdict::sandbox_violation}) {
    auto m = merge_variant_verdicts({variant("half", Verdict::correct), variant("odd", bad)});
    ASSERT_TRUE(m.has_value()) << verdict_name(bad);
    EXPECT_EQ(*m, ShapeVerdict::fail) << verdict_name(bad);
  }
  auto first = merge_variant_verdicts({variant("half", Verdict::wrong_output), variant("odd", Verdict::not_verified)});
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first, ShapeVerdict::fail);
}

TEST(MultishapeMerge, InconclusiveVariantsDoNotDecide) {
  EXPECT_FALSE(merge_variant_verdicts({}).has_value());
  EXPECT_FALSE(merge_variant_verdicts({variant("half", Verdict::not_verified), variant("odd", Verdict::environment_error)})
                   .has_value());
  auto m = merge_variant_verdicts({variant("half", Verdict::not_verified), variant("odd", Verdict::correct)});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(*m, ShapeVerdict::pass);
}

TEST(MultishapeMerge, AVariantTheCandidateTookPartInCannotBeInconclusive) {
  // A judge that could not compare the candidate's outputs (an error the candidate's reply
  // provoked), or a process that ended before its variants: the candidate's doing, so a failure.
  for (Verdict v : {Verdict::not_verified, Verdict::environment_error}) {
    ShapeVariantResult ran = variant("odd", v);
    ran.ran = true;
    auto m = merge_variant_verdicts({variant("half", Verdict::correct), ran});
    ASSERT_TRUE(m.has_value()) << verdict_name(v);
    EXPECT_EQ(*m, ShapeVerdict::fail) << verdict_name(v);
  }
}

TEST(MultishapeMerge, DefaultVariantsChangeSizes) {
  auto vs = default_shape_variants();
  ASSERT_GE(vs.size(), 2u);
  for (const ShapeVariant& v : vs) EXPECT_TRUE(v.size_scale != 1.0 || v.size_odd) << v.name;
}

TEST(MultishapeJson, CandidateJsonCarriesResultBesideVerdict) {
  CandidateResult c;
  c.verdict = Verdict::correct;
  c.multishape = MultishapeResult{ShapeVerdict::fail, {variant("half", Verdict::wrong_output)}};
  c.multishape->variants[0].message = "trial 0: mismatch";
  Json j = c.to_json();
  EXPECT_EQ(j["verdict"], "correct");
  EXPECT_EQ(j["multishape"]["verdict"], "fail");
  EXPECT_EQ(j["multishape"]["variants"][0]["name"], "half");
  EXPECT_EQ(j["multishape"]["variants"][0]["verdict"], "wrong_output");
  EXPECT_EQ(j["multishape"]["variants"][0]["message"], "trial 0: mismatch");
  auto back = multishape_from_json(j["multishape"]);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->verdict, ShapeVerdict::fail);
  ASSERT_EQ(back->variants.size(), 1u);
  EXPECT_EQ(back->variants[0].verdict, Verdict::wrong_output);

  CandidateResult none;
  none.multishape_note = "not run: the main verdict is not correct";
  Json k = none.to_json();
  EXPECT_TRUE(k["multishape"].is_null());
  EXPECT_EQ(k["multishape_note"], none.multishape_note);
  EXPECT_FALSE(multishape_from_json(k["multishape"]).has_value());
  EXPECT_FALSE(multishape_from_json(Json{{"verdict", "maybe"}}).has_value());
}

}  // namespace
}  // namespace kernelllm::harness
