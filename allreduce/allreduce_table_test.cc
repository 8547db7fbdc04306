// The family's table: one row per AllReduceKind in the enum's order, each
// found by its name, and the names Python reads (bench/cost_model.py's
// ALLREDUCE_FAMILY) the table's own, in the same order.
#include "allreduce/allreduce_table.h"

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

TEST(AllReduceTable, RowsFollowTheKindsAndAreFoundByName) {
  const std::vector<AllReduceEntry>& table = AllReduceTable();
  ASSERT_EQ(table.size(), 5u);
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(table[i].kind), i) << table[i].name;
    EXPECT_EQ(&AllReduceEntryOf(table[i].kind), &table[i]);
    EXPECT_EQ(FindAllReduce(table[i].name), &table[i]);
    EXPECT_NE(table[i].peers, nullptr) << table[i].name;
    EXPECT_NE(table[i].create, nullptr) << table[i].name;
  }
  EXPECT_EQ(FindAllReduce("nccl"), nullptr);
  for (const AllReduceEntry* candidate : SelectorCandidates()) {
    EXPECT_NE(candidate->predict, nullptr) << candidate->name;
  }
  EXPECT_EQ(SelectorCandidates().front()->kind, AllReduceKind::kRing);
}

// Every row's peer relation is symmetric (the transport needs it).
TEST(AllReduceTable, PeersAreSymmetric) {
  for (const AllReduceEntry& entry : AllReduceTable()) {
    for (int n = 1; n <= 9; ++n) {
      AlgorithmOptions options;
      options.ranks_per_node = n % 2 == 0 ? 2 : n;
      for (int p = 0; p < n; ++p) {
        for (int q : entry.peers(p, n, options)) {
          const std::vector<int> back = entry.peers(q, n, options);
          EXPECT_THAT(back, testing::Contains(p))
              << entry.name << " N=" << n << ": " << p << " -> " << q;
        }
      }
    }
  }
}

TEST(AllReduceTable, PythonReadsTheSameNames) {
  const std::string path =
      absl::StrCat(std::getenv("TEST_SRCDIR"), "/gradsync/bench/cost_model.py");
  std::ifstream file(path);
  ASSERT_TRUE(file) << path;
  std::stringstream text;
  text << file.rdbuf();
  const std::string source = text.str();
  std::smatch line;
  const std::regex family_line("\\nALLREDUCE_FAMILY = \\(([^)]*)\\)");
  ASSERT_TRUE(std::regex_search(source, line, family_line))
      << "no ALLREDUCE_FAMILY tuple in " << path;
  std::vector<std::string> python;
  const std::string listed = line[1].str();
  const std::regex quoted("\"([a-z_]+)\"");
  for (auto it = std::sregex_iterator(listed.begin(), listed.end(), quoted);
       it != std::sregex_iterator(); ++it) {
    python.push_back((*it)[1].str());
  }
  std::vector<std::string> table;
  for (const AllReduceEntry& entry : AllReduceTable()) {
    table.push_back(entry.name);
  }
  EXPECT_EQ(python, table);
}

}  // namespace
}  // namespace gradsync
