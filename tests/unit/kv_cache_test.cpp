// Paged KV cache: page allocation, sharing between forks, copy-on-write of a shared partial
// page, release and reuse of pages, sequence capacity.
#include <gtest/gtest.h>

#include "engine/cpu/kv_cache.h"

namespace kernelllm::cpu {
namespace {

constexpr int64_t kLayers = 2, kDim = 3, kPage = 4;

void write_position(PagedKvCache& kv, SeqId s, int64_t pos, float base) {
  for (int64_t l = 0; l < kLayers; ++l) {
    for (int64_t d = 0; d < kDim; ++d) {
      kv.key(s, l, pos)[d] = base + static_cast<float>(l * 10 + d);
      kv.value(s, l, pos)[d] = -(base + static_cast<float>(l * 10 + d));
    }
  }
}

float key_at(const PagedKvCache& kv, SeqId s, int64_t layer, int64_t pos) { return kv.key(s, layer, pos)[0]; }

TEST(PagedKvCache, AllocatesOnePagePerPageTokens) {
  PagedKvCache kv(kLayers, kDim, kPage, 8);
  auto s = kv.create();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(kv.length(*s), 0);
  EXPECT_EQ(kv.pages_in_use(), 0);
  kv.extend(*s, 4);
  EXPECT_EQ(kv.pages_in_use(), 1);
  kv.extend(*s, 1);
  EXPECT_EQ(kv.pages_in_use(), 2);
  kv.extend(*s, 7);
  EXPECT_EQ(kv.pages_in_use(), 3);
  EXPECT_EQ(kv.length(*s), 12);
  for (int64_t p = 0; p < 12; ++p) write_position(kv, *s, p, static_cast<float>(100 * p));
  for (int64_t p = 0; p < 12; ++p) {
    EXPECT_EQ(key_at(kv, *s, 1, p), static_cast<float>(100 * p + 10));
    EXPECT_EQ(kv.value(*s, 0, p)[2], -static_cast<float>(100 * p + 2));
  }
}

TEST(PagedKvCache, ForkSharesPagesAndCopiesASharedPartialPageOnWrite) {
  PagedKvCache kv(kLayers, kDim, kPage, 8);
  auto parent = kv.create();
  ASSERT_TRUE(parent.ok());
  kv.extend(*parent, 6);  // one full page, one partial page (2 of 4)
  for (int64_t p = 0; p < 6; ++p) write_position(kv, *parent, p, static_cast<float>(p));
  auto child = kv.fork(*parent);
  ASSERT_TRUE(child.ok());
  EXPECT_EQ(kv.length(*child), 6);
  EXPECT_EQ(kv.pages_in_use(), 2);
  EXPECT_EQ(kv.page_of(*child, 0), kv.page_of(*parent, 0));
  EXPECT_EQ(kv.page_of(*child, 5), kv.page_of(*parent, 5));

  kv.extend(*child, 1);
  write_position(kv, *child, 6, 777.0f);
  EXPECT_EQ(kv.page_of(*child, 0), kv.page_of(*parent, 0)) << "full pages stay shared";
  EXPECT_NE(kv.page_of(*child, 5), kv.page_of(*parent, 5)) << "the partial page was copied";
  EXPECT_EQ(kv.pages_in_use(), 3);
  for (int64_t p = 0; p < 6; ++p) EXPECT_EQ(key_at(kv, *child, 1, p), static_cast<float>(p + 10));
  EXPECT_EQ(key_at(kv, *child, 0, 6), 777.0f);

  kv.extend(*parent, 1);  // the parent's partial page is now its own: no copy
  EXPECT_EQ(kv.pages_in_use(), 3);
  write_position(kv, *parent, 6, 555.0f);
  EXPECT_EQ(key_at(kv, *parent, 0, 6), 555.0f);
  EXPECT_EQ(key_at(kv, *child, 0, 6), 777.0f);
}

TEST(PagedKvCache, ForkAtAPageBoundaryCopiesNothing) {
  PagedKvCache kv(kLayers, kDim, kPage, 8);
  auto parent = kv.create();
  kv.extend(*parent, 8);
  auto child = kv.fork(*parent);
  kv.extend(*child, 3);
  kv.extend(*parent, 3);
  EXPECT_EQ(kv.pages_in_use(), 4);
  EXPECT_EQ(kv.page_of(*child, 7), kv.page_of(*parent, 7));
}

TEST(PagedKvCache, ReleaseFreesUnsharedPagesAndReusesThem) {
  PagedKvCache kv(kLayers, kDim, kPage, 8);
  auto a = kv.create();
  kv.extend(*a, 9);  // 3 pages
  auto b = kv.fork(*a);
  kv.extend(*b, 4);  // copies page 2 and adds one
  EXPECT_EQ(kv.pages_in_use(), 5);
  kv.release(*a);
  EXPECT_FALSE(kv.contains(*a));
  EXPECT_EQ(kv.length(*a), -1);
  EXPECT_EQ(kv.pages_in_use(), 4);
  kv.release(*b);
  EXPECT_EQ(kv.pages_in_use(), 0);
  auto c = kv.create();
  kv.extend(*c, 4);
  EXPECT_EQ(kv.pages_in_use(), 1);
  kv.release(12345);  // unknown: ignored
}

TEST(PagedKvCache, SequenceCapacityIsAnErrorAndSlotsAreReused) {
  PagedKvCache kv(kLayers, kDim, kPage, 2);
  auto a = kv.create();
  auto b = kv.fork(*a);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = kv.create();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::resource_exhausted);
  EXPECT_FALSE(kv.fork(*a).ok());
  EXPECT_EQ(kv.fork(99).status().code(), ErrorCode::not_found);
  kv.release(*a);
  auto d = kv.create();
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, *a);
}

}  // namespace
}  // namespace kernelllm::cpu
