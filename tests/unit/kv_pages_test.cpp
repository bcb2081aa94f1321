// The backends' page table (kv_pages.h, host code): extension, sharing between forks,
// copy-on-write of a shared partial page, truncate taking an extension back, a growing pool.
#include "engine/kv_pages.h"

#include <gtest/gtest.h>

namespace kernelllm {
namespace {

TEST(KvPages, AGrowingPoolAddsPagesOnlyWhenNoneIsFree) {
  KvPages kv(0, 4, 4, /*grow=*/true);
  const SeqId s = *kv.create();
  std::vector<KvPages::Copy> copies;
  kv.extend(s, 6, copies);  // two pages, both new
  EXPECT_EQ(kv.num_pages(), 2);
  EXPECT_EQ(kv.free_pages(), 0);
  const SeqId f = *kv.fork(s);
  kv.extend(f, 1, copies);  // the shared partial page is copied into a third
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, kv.pages(s)[1]);
  EXPECT_EQ(copies[0].dst, 2);
  EXPECT_EQ(kv.num_pages(), 3);
  kv.release(f);  // its copy goes back to the pool and is taken before any new page
  EXPECT_EQ(kv.free_pages(), 1);
  kv.extend(s, 4, copies);
  EXPECT_EQ(kv.num_pages(), 3);
  EXPECT_EQ(kv.pages(s)[2], 2);
}

TEST(KvPages, ExtendTakesPagesAndTruncateGivesThemBack) {
  KvPages kv(8, 4, 4);
  const SeqId s = *kv.create();
  std::vector<KvPages::Copy> copies;
  kv.extend(s, 4, copies);
  EXPECT_EQ(kv.free_pages(), 7);
  kv.extend(s, 1, copies);  // position 4 opens a second page
  EXPECT_EQ(kv.free_pages(), 6);
  EXPECT_EQ(kv.pages(s).size(), 2u);
  kv.truncate(s, 4);
  EXPECT_EQ(kv.length(s), 4);
  EXPECT_EQ(kv.pages(s).size(), 1u);
  EXPECT_EQ(kv.free_pages(), 7);
  kv.extend(s, 2, copies);
  kv.truncate(s, 5);  // within the second page: it stays
  EXPECT_EQ(kv.length(s), 5);
  EXPECT_EQ(kv.pages(s).size(), 2u);
  kv.truncate(s, 9);  // longer than the sequence: nothing changes
  kv.truncate(s, -1);
  EXPECT_EQ(kv.length(s), 5);
  kv.truncate(s, 0);
  EXPECT_TRUE(kv.pages(s).empty());
  EXPECT_EQ(kv.free_pages(), 8);
  EXPECT_TRUE(copies.empty());
}

TEST(KvPages, TruncateAfterACopyOnWriteKeepsTheCopyAndTheSharedPages) {
  KvPages kv(8, 4, 4);
  const SeqId parent = *kv.create();
  std::vector<KvPages::Copy> copies;
  kv.extend(parent, 6, copies);  // a full page and half of a second
  const SeqId child = *kv.fork(parent);
  EXPECT_EQ(kv.refcount(kv.pages(parent)[1]), 2);
  EXPECT_EQ(kv.pages_needed(child, 1), 1);
  kv.extend(child, 1, copies);  // the shared partial page is copied for the child
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, kv.pages(parent)[1]);
  EXPECT_EQ(copies[0].dst, kv.pages(child)[1]);
  EXPECT_EQ(kv.free_pages(), 5);
  kv.truncate(child, 6);  // the step is taken back: the copy stays the child's
  EXPECT_EQ(kv.length(child), 6);
  EXPECT_EQ(kv.pages(child)[1], copies[0].dst);
  EXPECT_EQ(kv.pages(child)[0], kv.pages(parent)[0]);
  EXPECT_EQ(kv.refcount(kv.pages(parent)[0]), 2);
  EXPECT_EQ(kv.refcount(kv.pages(parent)[1]), 1);
  EXPECT_EQ(kv.pages_needed(child, 1), 0);  // no second copy
  kv.extend(child, 3, copies);  // fills the copy and opens a page
  EXPECT_EQ(copies.size(), 1u);
  kv.truncate(child, 6);
  EXPECT_EQ(kv.free_pages(), 5);
  kv.release(child);
  kv.release(parent);
  EXPECT_EQ(kv.free_pages(), 8);
}

}  // namespace
}  // namespace kernelllm
