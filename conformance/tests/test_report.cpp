#include <gtest/gtest.h>

#include <cmath>

#include "report.hpp"
#include "sha256.h"  // deepx::sha256, shared with the host

using namespace deepx::conformance;
using deepx::util::sha256_hex;

TEST(CertifyJson, EscapesEverythingJsonRequires) {
  EXPECT_EQ(json_escape("a\"b\\c\n\t\x01"), "a\\\"b\\\\c\\n\\t\\u0001");
  EXPECT_EQ(json_escape("ünïcode"), "ünïcode");
}

TEST(CertifyJson, WriterNestsAndSeparates) {
  JsonWriter w;
  w.begin_object();
  w.key("a").value(int64_t{1});
  w.key("b").begin_array().value("x").value(2.5).value(true).null().end_array();
  w.key("c").value(NAN);
  w.key("d").begin_object().end_object();
  w.key("e").raw("[1,2]");
  w.end_object();
  EXPECT_EQ(w.str(), "{\"a\":1,\"b\":[\"x\",2.5,true,null],\"c\":\"nan\",\"d\":{},\"e\":[1,2]}");
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
