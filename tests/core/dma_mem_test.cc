// SPDX-License-Identifier: MIT
// dma_alloc / dma_lookup.
#include "core/dma_mem.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>

namespace ulp
{
namespace
{

TEST(DmaMem, AllocIsZeroedPageRoundedAndLookedUp)
{
	auto r = dma_alloc(1000);
	ASSERT_TRUE(r);
	size_t pg = static_cast<size_t>(sysconf(_SC_PAGESIZE));
	EXPECT_GE(r->length(), 1000u);
	EXPECT_EQ(r->length() % pg, 0u);
	EXPECT_EQ(reinterpret_cast<uintptr_t>(r->addr()) % pg, 0u);
	EXPECT_GE(r->fd(), 0);
	auto *p = static_cast<uint8_t *>(r->addr());
	for (size_t i = 0; i < r->length(); i++)
		ASSERT_EQ(p[i], 0) << i;
	p[r->length() - 1] = 1; // writable to the end

	EXPECT_EQ(dma_lookup(p, r->length()), r.get());
	EXPECT_EQ(dma_lookup(p + 10, 20), r.get());
	EXPECT_EQ(dma_lookup(p + r->length() - 1, 1), r.get());
	EXPECT_EQ(dma_lookup(p + r->length() - 1, 2), nullptr); // straddles the end
	EXPECT_EQ(dma_lookup(p - 1, 2), nullptr);
}

TEST(DmaMem, RegionsAreDistinctAndForgottenWhenFreed)
{
	auto a = dma_alloc(4096, false);
	auto b = dma_alloc(4096, false);
	ASSERT_TRUE(a && b);
	EXPECT_FALSE(a->huge());
	EXPECT_NE(a->id(), b->id());
	EXPECT_EQ(dma_lookup(a->addr(), 1), a.get());
	EXPECT_EQ(dma_lookup(b->addr(), 1), b.get());
	void *pa = a->addr();
	a.reset();
	EXPECT_EQ(dma_lookup(pa, 1), nullptr);
	EXPECT_EQ(dma_lookup(b->addr(), 1), b.get());
}

TEST(DmaMem, HugeOrFallback)
{
	// With hugepages reserved the region is 2 MiB-rounded; without, it falls back.
	auto r = dma_alloc(3 << 20);
	ASSERT_TRUE(r);
	if (r->huge()) {
		EXPECT_EQ(r->length() % (2u << 20), 0u);
	}
	EXPECT_GE(r->length(), 3u << 20);
}

TEST(DmaMem, ZeroLengthFails)
{
	errno = 0;
	EXPECT_EQ(dma_alloc(0), nullptr);
	EXPECT_EQ(errno, EINVAL);
}

} // namespace
} // namespace ulp
