// Placeholder so the library has a source until the first real one lands.
namespace troupe::schedules_placeholder {}
