// The files the HUD's pages load from /hud/static, compiled into
// relay-stats by EmbedFiles.cmake from services/stats/hud/: relay's own
// script and style, and Chart.js from npm (pinned by
// services/stats/hud/package-lock.json), so the pages need no CDN.
#pragma once

#include <span>
#include <string_view>

namespace relay::stats {

struct HudAsset {
  std::string_view path;          // e.g. "/hud/static/hud.js"
  std::string_view content_type;
  std::string_view body;
};
std::span<const HudAsset> HudAssets();

}  // namespace relay::stats
