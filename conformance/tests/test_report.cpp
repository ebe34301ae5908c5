#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "digest.hpp"
#include "report.hpp"

using namespace deepx::conformance;

TEST(CertifyJson, NonFiniteNumbersAreStrings) {
  Json j = {{"a", json_number(2.5)}, {"nan", json_number(NAN)}, {"inf", json_number(INFINITY)},
            {"minf", json_number(-INFINITY)}};
  EXPECT_EQ(json_text(j), "{\"a\":2.5,\"nan\":\"nan\",\"inf\":\"inf\",\"minf\":\"-inf\"}");
}

TEST(CertifyJson, KeepsInsertionOrderAndEscapes) {
  Json j;
  j["z"] = "a\"b\\c\n\t\x01";
  j["a"] = Json::array({1, "x", true, nullptr});
  EXPECT_EQ(json_text(j), "{\"z\":\"a\\\"b\\\\c\\n\\t\\u0001\",\"a\":[1,\"x\",true,null]}");
}

TEST(CertifyJson, BytesThatAreNotUtf8DoNotThrow) {
  Json j = {{"name", std::string("plugin\xff\xfe")}};
  std::string text;
  ASSERT_NO_THROW(text = json_text(j));
  EXPECT_EQ(text, "{\"name\":\"plugin\xef\xbf\xbd\xef\xbf\xbd\"}");
  EXPECT_EQ(Json::parse(text)["name"], "plugin\xef\xbf\xbd\xef\xbf\xbd");
}

TEST(CertifyXml, Escapes) { EXPECT_EQ(xml_escape("<a b='c'>&\"\x02"), "&lt;a b=&apos;c&apos;&gt;&amp;&quot;?"); }

TEST(CertifySha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  EXPECT_EQ(sha256_hex(million), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(CertifySha256, FileMatchesItsBytesAndAMissingFileIsNullopt) {
  char path[] = "/tmp/deepx-sha256-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  std::string bytes(200000, 'a');  // more than one read buffer
  bytes += "abc";
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  close(fd);
  EXPECT_EQ(sha256_file(path), sha256_hex(bytes));
  std::remove(path);
  EXPECT_FALSE(sha256_file(path).has_value());
}
