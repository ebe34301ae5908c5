#include <gtest/gtest.h>

#include "html_report.hpp"

using namespace deepx::conformance;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + what.size())) ++n;
  return n;
}

HtmlReportData sample() {
  HtmlReportData d;
  d.plugin_name = "evil<script>alert('x')</script>";
  d.plugin_version = "1.0 & \"more\"";
  d.plugin_path = "/tmp/lib<b>.so";
  d.plugin_sha256 = "ab12";
  d.suite_version = "0.1.0";
  d.verdict = "NOT CERTIFIED (2 failures)";
  d.profile = "p";
  d.totals_line = "tests: 4 passed: 1 failed: 2 not_supported: 1 mistrusted: 0";
  HtmlCase pass{"dx.add", "f32", "PASS", "id1", "", "repro1", false, true, 0};
  HtmlCase ulp{"dx.exp", "f32", "PASS", "id2", "", "repro2", false, true, 3};
  HtmlCase crash{"dx.add", "f16", "CRASH", "id3", "killed by <signal> 11", "deepx-certify x --case 'op=dx.add a<b'", true,
                 false, 0};
  HtmlCase ns{"dx.exp", "i8", "NOT_SUPPORTED", "id4", "", "", false, false, 0};
  HtmlCase fail{"dx.exp", "f16", "FAIL", "id5", "1 ulp", "r5", true, true, 300};
  d.cases = {pass, ulp, crash, ns, fail};
  d.warnings = {"a <warning>"};
  d.worst_errors = {{"dx.exp", "f16", "id5", 300, 0.25, 0.125, 4, "1.5", "<1.75>"}};
  return d;
}

}  // namespace

TEST(CertifyHtml, EscapesEverySpecialCharacter) {
  EXPECT_EQ(html_escape("<a href=\"x\">&'</a>"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
  EXPECT_EQ(html_escape("tab\tnl\nbell\x07"), "tab\tnl\nbell?");
}

TEST(CertifyHtml, IsSelfContainedAndEscapesPluginStrings) {
  const std::string html = render_html_report(sample());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("</html>"), std::string::npos);
  // Plugin-provided strings never reach the page as markup.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<b>"), std::string::npos);
  EXPECT_NE(html.find("evil&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("1.0 &amp; &quot;more&quot;"), std::string::npos);
  EXPECT_NE(html.find("killed by &lt;signal&gt; 11"), std::string::npos);
  EXPECT_NE(html.find("--case &#39;op=dx.add a&lt;b&#39;"), std::string::npos);
  // No external resources.
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("http"), std::string::npos);
  // Balanced structure for the elements the page uses.
  for (const char* tag : {"table", "tr", "ul", "li", "pre", "h2"})
    EXPECT_EQ(count(html, std::string("<") + tag + ">") + count(html, std::string("<") + tag + " "),
              count(html, std::string("</") + tag + ">"))
        << tag;
}

TEST(CertifyHtml, ShowsVerdictMatrixHistogramsAndFailures) {
  const std::string html = render_html_report(sample());
  EXPECT_NE(html.find("verdict: NOT CERTIFIED (2 failures)"), std::string::npos);
  EXPECT_NE(html.find("class=\"verdict not-certified\""), std::string::npos);
  // Matrix: a row per op, the worst status of each cell, colored by class.
  EXPECT_NE(html.find("<table class=\"matrix\">"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"s-crash\" title=\"CRASH 1\">CRASH 1</td>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"s-pass\" title=\"PASS 1\">PASS 1</td>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"s-not-supported\""), std::string::npos);
  EXPECT_NE(html.find("<td class=\"s-fail\" title=\"FAIL 1\">FAIL 1</td>"), std::string::npos);
  // Histograms: dx.add and dx.exp had float comparisons.
  EXPECT_EQ(count(html, "<div class=\"hist\">"), 2u);
  EXPECT_NE(html.find("Failures (2)"), std::string::npos);
  EXPECT_NE(html.find("<pre>r5</pre>"), std::string::npos);
  EXPECT_NE(html.find("RELAXED (0)"), std::string::npos);
  EXPECT_NE(html.find("a &lt;warning&gt;"), std::string::npos);
}

TEST(CertifyHtml, ShowsTheWorstErrorPerOpAndDtype) {
  const std::string html = render_html_report(sample());
  EXPECT_NE(html.find("<h2>Worst errors (per op and output dtype)</h2>"), std::string::npos);
  EXPECT_NE(html.find("<tr><td class=\"op\">dx.exp</td><td>f16</td><td>300</td><td>0.25</td><td>0.125</td>"
                      "<td class=\"mono\">id5</td><td class=\"mono\">[4] expected 1.5 got &lt;1.75&gt;</td></tr>"),
            std::string::npos);
  HtmlReportData none = sample();
  none.worst_errors.clear();
  EXPECT_EQ(render_html_report(none).find("<table class=\"worst\">"), std::string::npos);
}

TEST(CertifyHtml, UlpBuckets) {
  EXPECT_EQ(ulp_bucket(0), 0);
  EXPECT_EQ(ulp_bucket(1), 1);
  EXPECT_EQ(ulp_bucket(3), 2);
  EXPECT_EQ(ulp_bucket(4), 3);
  EXPECT_EQ(ulp_bucket(15), 4);
  EXPECT_EQ(ulp_bucket(255), 5);
  EXPECT_EQ(ulp_bucket(256), 6);
  EXPECT_EQ(ulp_bucket(~0ull), 6);
}
