package docker

// SetAfterEnginePull makes d run f once the engine holds an image Pull
// pulled, before Pull checks and returns it (an error from f ends Pull
// there, as a killed agent would).
func SetAfterEnginePull(d *Driver, f func(ref string) error) { d.afterEnginePull = f }
