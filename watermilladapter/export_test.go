package watermilladapter

// SettleLinger is settleLinger, for the tests of watermilladapter_test
// that move a test clock through the settler's wait.
const SettleLinger = settleLinger
