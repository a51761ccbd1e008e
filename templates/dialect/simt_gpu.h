// One simdgroup (warp) is one row: the lane loop runs once, as this thread's lane.
#define FOR_EACH_ROW(row, R, RPG) \
  for (uint row = GROUP_X * (RPG) + SIMDGROUP_ID, once_row_ = 1u; once_row_ && row < (R); once_row_ = 0u)
// A simdgroup holds RPS consecutive rows from row0 (rows_per_simd): each lane keeps its
// lane's partials of all of them, so one x load serves RPS rows.
#define FOR_EACH_ROWS(row0, R, RPG, RPS) \
  for (uint row0 = (GROUP_X * (RPG) + SIMDGROUP_ID) * (RPS), once_row_ = 1u; once_row_ && row0 < (R); once_row_ = 0u)
#define LANE_ARRAY(type, name, n) type name[1][n]
#define FOR_EACH_LANE(lane) for (uint lane = LANE_ID, once_lane_ = 1u; once_lane_; once_lane_ = 0u)
#define LANE(name) name[0]
#define LANE_IS_ZERO (LANE_ID == 0u)
#define BUTTERFLY(name, i) lane_butterfly(name[0][i])
