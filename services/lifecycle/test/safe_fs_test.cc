// What root writes next to the teams' directories never follows a link a
// team planted (issue 27, item 1), checked on a scratch directory.
#include "../src/safe_fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace relay::lifecycle {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class SafeFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/safe-fs-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    victim_ = dir_ + "/victim";
    std::ofstream(victim_) << "precious\n";
    ::chmod(victim_.c_str(), 0644);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  void ExpectVictimIntact() {
    struct stat st {};
    ASSERT_EQ(::stat(victim_.c_str(), &st), 0);
    EXPECT_EQ(Read(victim_), "precious\n");
    EXPECT_EQ(st.st_mode & 0777, 0644u);
  }
  std::string dir_, victim_;
};

TEST_F(SafeFsTest, ServiceDirsAreMadeAndSymlinksRefused) {
  auto made = OpenServiceDir(dir_ + "/a/b/state", 0711);
  ASSERT_TRUE(made.ok()) << made.status();
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/a/b/state").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0711u);
  ASSERT_EQ(::symlink(victim_.c_str(), (dir_ + "/link").c_str()), 0);
  auto link = OpenServiceDir(dir_ + "/link", 0711);
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(link.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(link.status().message().find("symlink"), std::string_view::npos) << link.status();
  ExpectVictimIntact();
}

TEST_F(SafeFsTest, AServiceDirOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "chown needs root";
  ASSERT_EQ(::mkdir((dir_ + "/theirs").c_str(), 0755), 0);
  ASSERT_EQ(::chown((dir_ + "/theirs").c_str(), 61234, 61234), 0);
  auto theirs = OpenServiceDir(dir_ + "/theirs", 0711);
  ASSERT_FALSE(theirs.ok());
  EXPECT_NE(theirs.status().message().find("belongs to uid 61234"), std::string_view::npos) << theirs.status();
}

TEST_F(SafeFsTest, EnsureDirAtNeverFollowsALink) {
  auto parent = OpenServiceDir(dir_, 0700);
  ASSERT_TRUE(parent.ok());
  ASSERT_EQ(::symlink(victim_.c_str(), (dir_ + "/work").c_str()), 0);
  auto work = EnsureDirAt(*parent, "work", 0700);
  EXPECT_FALSE(work.ok()) << "a link where a directory belongs is refused";
  ExpectVictimIntact();
  auto fresh = EnsureDirAt(*parent, "fresh", 0750);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/fresh").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0750u);
  EXPECT_FALSE(EnsureDirAt(*parent, "../escape", 0700).ok());
}

TEST_F(SafeFsTest, WriteFileAtReplacesALinkInsteadOfWritingThroughIt) {
  auto parent = OpenServiceDir(dir_, 0700);
  ASSERT_TRUE(parent.ok());
  // Links at the file and at its temporary: the file is replaced (rename
  // swaps the link itself), the temporary is removed first.
  ASSERT_EQ(::symlink(victim_.c_str(), (dir_ + "/token").c_str()), 0);
  ASSERT_EQ(::symlink(victim_.c_str(), (dir_ + "/token.tmp").c_str()), 0);
  ASSERT_TRUE(WriteFileAt(*parent, "token", "s3cret", 0600).ok());
  ExpectVictimIntact();
  struct stat st {};
  ASSERT_EQ(::lstat((dir_ + "/token").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(Read(dir_ + "/token"), "s3cret");
}

TEST_F(SafeFsTest, RemoveTreeAtRemovesLinksNotWhatTheyPointAt) {
  auto parent = OpenServiceDir(dir_, 0700);
  ASSERT_TRUE(parent.ok());
  ASSERT_EQ(::mkdir((dir_ + "/keep").c_str(), 0755), 0);
  std::ofstream(dir_ + "/keep/file") << "kept\n";
  ASSERT_EQ(::mkdir((dir_ + "/tree").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((dir_ + "/tree/sub").c_str(), 0700), 0);
  std::ofstream(dir_ + "/tree/sub/f") << "x";
  ASSERT_EQ(::symlink((dir_ + "/keep").c_str(), (dir_ + "/tree/dir-link").c_str()), 0);
  ASSERT_EQ(::symlink(victim_.c_str(), (dir_ + "/tree/sub/file-link").c_str()), 0);
  ASSERT_TRUE(RemoveTreeAt(*parent, "tree").ok());
  EXPECT_NE(::access((dir_ + "/tree").c_str(), F_OK), 0);
  EXPECT_EQ(Read(dir_ + "/keep/file"), "kept\n");
  ExpectVictimIntact();
  EXPECT_TRUE(RemoveTreeAt(*parent, "tree").ok()) << "gone already: nothing to do";
  // The tree itself a link: the link goes, its target stays.
  ASSERT_EQ(::symlink((dir_ + "/keep").c_str(), (dir_ + "/tree").c_str()), 0);
  ASSERT_TRUE(RemoveTreeAt(*parent, "tree").ok());
  EXPECT_EQ(Read(dir_ + "/keep/file"), "kept\n");
}

}  // namespace
}  // namespace relay::lifecycle
