package feedserver

import "time"

// Slugs of the feeds that misbehave on purpose. A reader that subscribes to
// them sees its failure handling at work.
const (
	// SlugFailing names the feed that always answers 500 Internal Server Error.
	SlugFailing = "always-failing"
	// SlugMalformed names the feed that answers 200 with a document that is
	// not well-formed XML.
	SlugMalformed = "malformed"
	// SlugSlow names the feed that waits [Config.SlowDelay] before it answers
	// with a valid RSS document.
	SlugSlow = "slow"
)

// sample describes one bundled feed: how it is served and what it writes
// about.
type sample struct {
	slug  string
	title string
	about string
	// lang is the language the feed is written in, an ISO 639-1 code; empty
	// means English.
	lang     string
	format   Format
	behavior Behavior
	// every multiplies [Config.PublishInterval]: the feed gains a new entry
	// every (every × PublishInterval).
	every int
	// maxAge, when set, is sent as Cache-Control: max-age.
	maxAge time.Duration
	// expires, when set, is sent as an Expires header this far in the future.
	expires time.Duration
	// ttl, when set, is written as the RSS <ttl> element (whole minutes).
	ttl time.Duration
	// syPeriod and syFrequency, when set, are written as the RSS syndication
	// module's sy:updatePeriod and sy:updateFrequency.
	syPeriod    string
	syFrequency int
	// noGUID leaves the RSS <guid> out, so readers must identify entries by
	// their link.
	noGUID bool
	// author is the entry author's name.
	author string
	// titles are headlines, used in a seeded order and numbered once they
	// run out.
	titles []string
	// sentences make up summaries and article paragraphs.
	sentences []string
}

// samples is the fixed catalogue of bundled feeds, in the order the index
// page and [Server.Feeds] list them.
var samples = []sample{
	{
		slug:   "harbor-engineering",
		title:  "Harbor Engineering Blog",
		about:  "How a mid-sized shipping company builds and runs its software.",
		format: FormatAtom, behavior: BehaviorNormal, every: 1,
		maxAge: time.Minute,
		author: "Ines Okafor",
		titles: []string{
			"Moving our billing jobs onto a Postgres queue",
			"What we learned from a week of connection storms",
			"Idempotency keys in practice",
			"Retiring the cron box under the stairs",
			"Tracing a container from booking to berth",
			"Backpressure is a product decision",
			"Our on-call handbook, revised",
			"Schema migrations without a maintenance window",
		},
		sentences: []string{
			"The old system worked, as long as nobody looked at it too closely.",
			"We started by measuring how often a job ran twice, and the answer surprised us.",
			"Every write now carries a key, so a retry can never bill a customer twice.",
			"The migration took three weeks, most of which went into the rollback plan.",
			"Latency at the 99th percentile dropped from seconds to tens of milliseconds.",
			"A single table with a partial index turned out to be all the scheduler we needed.",
			"We kept the dashboards simple: queue depth, oldest job, and failures per hour.",
		},
	},
	{
		slug:   "night-sky",
		title:  "Night Sky Almanac",
		about:  "What to look for overhead this week, with or without a telescope.",
		format: FormatRSS, behavior: BehaviorNormal, every: 2,
		ttl:    time.Hour,
		author: "almanac@example.org (Tomas Lindqvist)",
		titles: []string{
			"Jupiter rises before midnight",
			"A thin crescent meets Venus at dusk",
			"The Perseids peak under a dark sky",
			"Finding the Andromeda galaxy with binoculars",
			"The space station passes overhead five times",
			"Saturn's rings tilt toward us again",
			"A partial lunar eclipse on Tuesday",
			"Orion returns to the morning sky",
		},
		sentences: []string{
			"Look low in the south-east about an hour after sunset.",
			"No telescope is needed, though steady binoculars show much more.",
			"The best view comes after moonset, away from street lights.",
			"Give your eyes twenty minutes to adapt before you give up.",
			"Clouds are forecast for the north, so the south has the better chance.",
			"A camera on a tripod with a ten-second exposure will catch it.",
		},
	},
	{
		slug:   "kitchen-chemistry",
		title:  "Kitchen Chemistry",
		about:  "The science behind everyday cooking.",
		format: FormatRSS, behavior: BehaviorNormal, every: 3,
		noGUID: true,
		author: "kitchen@example.org (Priya Raman)",
		titles: []string{
			"Why resting dough makes better bread",
			"The Maillard reaction, one onion at a time",
			"Salt your pasta water, but not for the reason you think",
			"Emulsions: keeping mayonnaise together",
			"Caramel is controlled burning",
			"What baking soda really does to cookies",
			"Cold butter and the flakiest pastry",
			"Pickling with nothing but salt and time",
		},
		sentences: []string{
			"Gluten needs water and time more than it needs kneading.",
			"Browning starts once the surface dries above about 140 degrees.",
			"An acid speeds the reaction, which is why a squeeze of lemon helps.",
			"The fat coats the flour and keeps the layers from fusing.",
			"Temperature matters more than the exact recipe.",
			"Weigh your ingredients once and the results stop varying.",
		},
	},
	{
		slug:   "cycling-dispatch",
		title:  "Cycling Dispatch",
		about:  "Race reports, routes and repairs.",
		format: FormatAtom, behavior: BehaviorNormal, every: 1,
		maxAge: 5 * time.Second,
		author: "Marco Bellini",
		titles: []string{
			"Stage nine: the breakaway that stuck",
			"A gravel loop through the river valley",
			"Truing a wheel at home",
			"Tubeless tyres, one season later",
			"The climb that decided the spring classic",
			"Winter training without a trainer",
			"Commuting by bike in the rain",
			"Chain wear, measured and explained",
		},
		sentences: []string{
			"The peloton let the gap grow to four minutes, and never closed it.",
			"The route follows the old railway line for most of its length.",
			"A spoke key and a little patience are all you need.",
			"Punctures dropped to one in three months of riding.",
			"The final climb averages nine percent for six kilometres.",
			"Mudguards make more difference than any jacket.",
		},
	},
	{
		slug:   "small-garden",
		title:  "Small Garden Notes",
		about:  "Growing food on balconies, windowsills and borrowed corners.",
		format: FormatRSS, behavior: BehaviorNormal, every: 2,
		syPeriod: "hourly", syFrequency: 2,
		author: "garden@example.org (Hanna Weiss)",
		titles: []string{
			"Tomatoes in a bucket, week six",
			"Saving seed from this year's beans",
			"A worm bin for a flat with no garden",
			"Herbs that survive a north-facing sill",
			"Watering less and growing more",
			"Planning the autumn sowing",
			"Slugs, and what finally worked",
			"Strawberries in hanging baskets",
		},
		sentences: []string{
			"Twenty litres of compost is enough for one determinate plant.",
			"Mint will take over anything you let it near.",
			"A saucer under the pot saved most of the watering.",
			"Sow little and often rather than all at once.",
			"The basil bolted in the heat, so the next batch went in the shade.",
			"Coffee grounds did nothing for the slugs, but copper tape did.",
		},
	},
	{
		slug:   "open-source-digest",
		title:  "Open Source Digest",
		about:  "A weekly round-up of releases and discussions in open source.",
		format: FormatAtom, behavior: BehaviorNormal, every: 2,
		expires: 30 * time.Second,
		author:  "Open Source Digest editors",
		titles: []string{
			"A new major version of a popular job queue",
			"The state of package signing",
			"Maintainers on burnout, and what helped",
			"A database driver drops support for old servers",
			"Fuzzing finds a parser bug, again",
			"License changes and what they mean for users",
			"Release notes worth reading this week",
			"Small libraries that deserve more stars",
		},
		sentences: []string{
			"The changelog lists over two hundred merged pull requests.",
			"Most of the work went into documentation and error messages.",
			"Users on the previous version are advised to upgrade before the next release.",
			"The discussion thread is long, but the first post sums it up well.",
			"Several distributions have already packaged the new version.",
			"The project is looking for reviewers more than for code.",
		},
	},
	{
		slug:   "transit-updates",
		title:  "Riverside Transit Service Updates",
		about:  "Planned works, diversions and timetable changes.",
		format: FormatRSS, behavior: BehaviorNormal, every: 1,
		maxAge: 3 * time.Second, ttl: 5 * time.Minute,
		author: "service@example.org (Riverside Transit)",
		titles: []string{
			"Line 4 diverted around the market this weekend",
			"Night buses return on the harbour route",
			"Lift out of service at Central station",
			"New timetable for the airport express",
			"Engineering works close the north branch on Sunday",
			"Contactless payment now accepted on all trams",
			"Stop moved on Mill Road for resurfacing",
			"Extra services for the stadium concert",
		},
		sentences: []string{
			"Please allow an extra fifteen minutes for your journey.",
			"Replacement buses run every ten minutes from the usual stops.",
			"The change applies from the first service on Saturday.",
			"Step-free access is available via the east entrance.",
			"Tickets bought before the change remain valid.",
			"Live departure times are shown on the stop displays.",
		},
	},
	{
		slug:   "distributed-reading",
		title:  "Distributed Systems Reading Group",
		about:  "Notes from a reading group working through classic papers.",
		format: FormatAtom, behavior: BehaviorNormal, every: 3,
		author: "Reading group notes",
		titles: []string{
			"Time, clocks, and the ordering of events",
			"Reading the Raft paper slowly",
			"Exactly-once is a property of the whole system",
			"Leases: a fault-tolerant mechanism for cache consistency",
			"Why the outbox pattern keeps coming back",
			"Sagas, thirty years on",
			"Fencing tokens and the zombie leader",
			"Harvest, yield and graceful degradation",
		},
		sentences: []string{
			"The paper is short, but every paragraph carries weight.",
			"We spent most of the hour on a single diagram.",
			"A lease bounds how long a stale owner can do harm.",
			"Retries are safe only when the operation is idempotent.",
			"Someone pointed out that the database is already a log.",
			"Next week we read the follow-up and compare the proofs.",
		},
	},
	{
		slug:   "birdwatch",
		title:  "Birdwatch Journal",
		about:  "Sightings and field notes from the estuary.",
		format: FormatRSS, behavior: BehaviorNormal, every: 2,
		author: "birds@example.org (Aoife Gallagher)",
		titles: []string{
			"Avocets back on the mudflats",
			"A kingfisher at the sluice gate",
			"Counting geese at first light",
			"The swifts have arrived",
			"An osprey passes through",
			"Dawn chorus, recorded",
			"Waders at the spring tide",
			"A rare visitor in the reed beds",
		},
		sentences: []string{
			"High tide pushed the birds close to the hide.",
			"Forty-two birds counted, the most this season.",
			"It stayed for ten minutes and then headed north.",
			"The light was poor, but the call was unmistakable.",
			"Bring a flask: the wind off the water is cold.",
			"The path to the second hide is flooded until further notice.",
		},
	},
	{
		slug:   "security-advisories",
		title:  "Lighthouse Security Advisories",
		about:  "Advisories for the Lighthouse web server and its modules.",
		format: FormatAtom, behavior: BehaviorNormal, every: 1,
		maxAge: 10 * time.Second,
		author: "Lighthouse security team",
		titles: []string{
			"Header parsing can read past a buffer",
			"Path traversal in the static file module",
			"Denial of service through compressed requests",
			"Session tokens logged at debug level",
			"Open redirect in the login handler",
			"Request smuggling behind some proxies",
			"Timing leak in password comparison",
			"Certificate validation skipped on reload",
		},
		sentences: []string{
			"All versions before the fixed release are affected.",
			"No exploitation in the wild is known at the time of writing.",
			"Upgrade, or disable the module until you can.",
			"The flaw was reported privately and fixed within a week.",
			"Default configurations are not affected.",
			"Severity is rated high because no authentication is required.",
		},
	},
	{
		slug:   "marche-du-quartier",
		title:  "Le Marché du Quartier",
		about:  "Les nouvelles du marché couvert : producteurs, saisons et recettes.",
		lang:   "fr",
		format: FormatRSS, behavior: BehaviorNormal, every: 2,
		ttl:    10 * time.Minute,
		author: "marche@example.org (Claire Dubois)",
		titles: []string{
			"Les premières fraises sont arrivées",
			"Le fromager du samedi change de place",
			"Une soupe de saison pour les soirs de pluie",
			"Les pommes anciennes du verger voisin",
			"Le boulanger ouvre dès six heures",
			"Trois façons de cuisiner les poireaux",
			"Le marché de nuit revient en juillet",
			"Des champignons après les premières pluies",
		},
		sentences: []string{
			"Les producteurs de la vallée sont de retour sous la grande halle.",
			"Il faut venir tôt, car les meilleurs paniers partent avant neuf heures.",
			"La recette est simple et ne demande que des légumes du marché.",
			"Le prix reste le même que l'an dernier, ce qui est une bonne nouvelle.",
			"Nous avons demandé au maraîcher comment il choisit ses variétés.",
			"Les enfants peuvent goûter les fruits avant que les parents ne les achètent.",
		},
	},
	{
		slug:   "bergwetter",
		title:  "Bergwetter am Morgen",
		about:  "Das Wetter in den Bergen, jeden Morgen neu eingeschätzt.",
		lang:   "de",
		format: FormatAtom, behavior: BehaviorNormal, every: 2,
		maxAge: 20 * time.Second,
		author: "Lukas Brunner",
		titles: []string{
			"Föhn am Alpenrand, Gewitter am Nachmittag",
			"Neuschnee oberhalb von zweitausend Metern",
			"Ein klarer Tag für die Gipfeltour",
			"Nebel im Tal, Sonne auf den Höhen",
			"Kaltfront bringt Regen und Wind",
			"Lawinengefahr steigt auf Stufe drei",
			"Die Hütten öffnen für den Sommer",
			"Hitze im Tal, frische Luft am Grat",
		},
		sentences: []string{
			"Am Vormittag ist es noch ruhig, aber die Wolken wachsen schnell.",
			"Wer früh aufbricht, ist vor den Gewittern wieder im Tal.",
			"Die Temperaturen sinken in der Nacht auf den Gipfeln unter null.",
			"Der Wind dreht auf Nordwest und wird in der Höhe stürmisch.",
			"Für die Wege auf der Südseite reichen feste Schuhe und eine Jacke.",
			"Die Sicht ist gut, und die Fernsicht reicht bis zu den Gletschern.",
		},
	},
	{
		slug:   SlugFailing,
		title:  "Always Failing",
		about:  "A feed whose server always answers 500 Internal Server Error.",
		format: FormatRSS, behavior: BehaviorFailing, every: 1,
	},
	{
		slug:   SlugMalformed,
		title:  "Malformed Feed",
		about:  "A feed that answers 200 with a document that is not well-formed XML.",
		format: FormatRSS, behavior: BehaviorMalformed, every: 1,
	},
	{
		slug:   SlugSlow,
		title:  "Slow Station",
		about:  "Weather reports from a station at the end of a very long cable.",
		format: FormatRSS, behavior: BehaviorSlow, every: 2,
		ttl:    30 * time.Minute,
		author: "station@example.org (Far Point Weather Station)",
		titles: []string{
			"Gale warning for the outer banks",
			"Clear skies and a hard frost",
			"Fog rolls in at noon",
			"Record rainfall for the month",
			"Wind backing south-west, rising",
			"A calm night at last",
		},
		sentences: []string{
			"Pressure is falling steadily.",
			"Visibility dropped below two hundred metres.",
			"The anemometer recorded a gust of ninety kilometres an hour.",
			"Temperatures will recover by the afternoon.",
			"The cable was repaired, though the link is still slow.",
		},
	},
}

// language returns the ISO 639-1 code of the language the feed is written
// in.
func (s sample) language() string {
	if s.lang == "" {
		return "en"
	}
	return s.lang
}

// bylines are the words that introduce an author on an article page, by
// language.
var bylines = map[string]string{"en": "By", "fr": "Par", "de": "Von"}
